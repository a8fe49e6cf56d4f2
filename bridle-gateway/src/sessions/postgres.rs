//! The sessions registry's ledger in PostgreSQL (feature `postgres`): what every replica on one
//! state database has seen of connected agents.
//!
//! Three tables, versioned as the `sessions` store of `schema_migrations`: the live sessions
//! (one row per session id, its request count the sum of what each replica added), the
//! sessions an operator ended (kept for twice the idle timeout, so a replica that had not yet
//! heard still refuses them after a restart), and the call counts per agent. An end is
//! announced on [`SESSIONS_CHANNEL`] in the transaction that records it (delivered at commit).
//!
//! A session its client deleted is forgotten: its rows are deleted with no end recorded, and
//! it is announced on the same channel (`forgotten ID`). Its id is kept in a fifth table
//! (`gateway_session_forgets`, as long as an end) only so that a replica's write of a request
//! it counted just before the deletion does not bring the session back.
//!
//! A fourth table holds what another replica needs to resume a 2025-11-25 session
//! ([`PgSessionStore`]): its owner and its `initialize` parameters, written once after the
//! handshake, dropped with the session (ended by an operator, deleted by its client, or idle;
//! a session holding a listen stream open is written as seen at every exchange, so it is not
//! idle, as the transport, which rechecks its sessions here, does not count it idle either).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bridle_rules::db::postgres::PgDatabase;
use bridle_rules::db::{Migration, Migrations};

use crate::error::GatewayError;
use crate::sessions::ledger::{
    ENDED_PREFIX, FORGOTTEN_PREFIX, SessionBatch, SessionLedger, SessionSnapshot,
};
use crate::sessions::{CallCounts, Generation, SessionRecord};

/// The `NOTIFY` channel on which an ended session is announced (payload `ended ID`), and a
/// session its client deleted (payload `forgotten ID`).
pub const SESSIONS_CHANNEL: &str = "bridle_sessions";

/// The sessions registry's tables in PostgreSQL. Never edit a released step, add one.
pub const SESSIONS_PG_MIGRATIONS: Migrations = Migrations {
    store: "sessions",
    steps: &[
        Migration {
            version: 1,
            name: "baseline",
            sql: "
CREATE TABLE gateway_sessions (
    id               TEXT PRIMARY KEY,
    agent            TEXT NOT NULL,
    agent_type       TEXT,
    client_name      TEXT,
    client_version   TEXT,
    generation       TEXT NOT NULL,
    protocol_version TEXT,
    started_ms       BIGINT NOT NULL,
    last_seen_ms     BIGINT NOT NULL,
    requests         BIGINT NOT NULL
);
CREATE INDEX gateway_sessions_last_seen ON gateway_sessions (last_seen_ms);
CREATE TABLE gateway_session_ends (
    id       TEXT PRIMARY KEY,
    ended_ms BIGINT NOT NULL
);
CREATE TABLE gateway_session_calls (
    agent   TEXT PRIMARY KEY,
    made    BIGINT NOT NULL,
    refused BIGINT NOT NULL
);
",
        },
        Migration {
            version: 2,
            name: "resumable sessions",
            sql: "
CREATE TABLE gateway_session_states (
    id         TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    initialize TEXT NOT NULL,
    stored_ms  BIGINT NOT NULL
);
",
        },
        Migration {
            version: 3,
            name: "sessions deleted by their clients",
            sql: "
CREATE TABLE gateway_session_forgets (
    id           TEXT PRIMARY KEY,
    forgotten_ms BIGINT NOT NULL
);
",
        },
    ],
};

/// The advisory-lock key of a batch's transaction, apart from the other stores' keys: batches
/// of several replicas then add their counts one after another, never deadlocking on rows.
const BATCH_LOCK: i64 = 0x6273_6573_0000_0001;

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn generation_name(g: Generation) -> &'static str {
    match g {
        Generation::Stateful => "stateful",
        Generation::Stateless => "stateless",
    }
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The sessions registry's ledger on the gateway's PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PgSessionLedger {
    db: PgDatabase,
}

impl PgSessionLedger {
    /// Migrates the tables. A database newer than this build is refused (`database_too_new`).
    pub fn open(db: PgDatabase) -> Result<Self, GatewayError> {
        db.migrate(&SESSIONS_PG_MIGRATIONS)?;
        Ok(Self { db })
    }
}

impl SessionLedger for PgSessionLedger {
    fn write(&self, batch: &SessionBatch) -> Result<(), GatewayError> {
        if batch.is_empty() {
            return Ok(());
        }
        let tx = self.db.client()?.begin(Some(BATCH_LOCK))?;
        let now = now_ms();
        for id in &batch.ended {
            tx.execute("DELETE FROM gateway_sessions WHERE id = $1", &[id])?;
            tx.execute("DELETE FROM gateway_session_states WHERE id = $1", &[id])?;
            tx.execute(
                "INSERT INTO gateway_session_ends (id, ended_ms) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
                &[id, &now],
            )?;
            tx.execute(
                "SELECT pg_notify($1, $2)",
                &[&SESSIONS_CHANNEL, &format!("{ENDED_PREFIX}{id}")],
            )?;
        }
        for id in &batch.forgotten {
            tx.execute("DELETE FROM gateway_sessions WHERE id = $1", &[id])?;
            tx.execute("DELETE FROM gateway_session_states WHERE id = $1", &[id])?;
            tx.execute(
                "INSERT INTO gateway_session_forgets (id, forgotten_ms) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
                &[id, &now],
            )?;
            tx.execute(
                "SELECT pg_notify($1, $2)",
                &[&SESSIONS_CHANNEL, &format!("{FORGOTTEN_PREFIX}{id}")],
            )?;
        }
        for (s, requests) in &batch.touched {
            // An ended or forgotten session is not brought back, and a session id presented
            // by another agent than the one that opened it is not merged into that session.
            tx.execute(
                "INSERT INTO gateway_sessions AS s
                     (id, agent, agent_type, client_name, client_version, generation,
                      protocol_version, started_ms, last_seen_ms, requests)
                 SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10
                 WHERE NOT EXISTS (SELECT 1 FROM gateway_session_ends WHERE id = $1)
                   AND NOT EXISTS (SELECT 1 FROM gateway_session_forgets WHERE id = $1)
                 ON CONFLICT (id) DO UPDATE SET
                     last_seen_ms = GREATEST(s.last_seen_ms, excluded.last_seen_ms),
                     requests = s.requests + excluded.requests,
                     client_name = COALESCE(excluded.client_name, s.client_name),
                     client_version = COALESCE(excluded.client_version, s.client_version),
                     protocol_version = COALESCE(excluded.protocol_version, s.protocol_version)
                 WHERE s.agent = excluded.agent",
                &[
                    &s.id,
                    &s.agent,
                    &s.agent_type,
                    &s.client_name,
                    &s.client_version,
                    &generation_name(s.generation),
                    &s.protocol_version,
                    &count(s.started_ms),
                    &count(s.last_seen_ms),
                    &count(*requests),
                ],
            )?;
        }
        for (agent, c) in &batch.calls {
            tx.execute(
                "INSERT INTO gateway_session_calls AS c (agent, made, refused) VALUES ($1, $2, $3)
                 ON CONFLICT (agent) DO UPDATE SET made = c.made + excluded.made, refused = c.refused + excluded.refused",
                &[agent, &count(c.made), &count(c.refused)],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    fn read(&self, idle: Duration) -> Result<SessionSnapshot, GatewayError> {
        let client = self.db.client()?;
        let now = now_ms();
        let idle_ms = i64::try_from(idle.as_millis()).unwrap_or(i64::MAX);
        client.execute(
            "DELETE FROM gateway_sessions WHERE last_seen_ms < $1",
            &[&now.saturating_sub(idle_ms)],
        )?;
        client.execute(
            "DELETE FROM gateway_session_ends WHERE ended_ms < $1",
            &[&now.saturating_sub(idle_ms.saturating_mul(2))],
        )?;
        client.execute(
            "DELETE FROM gateway_session_forgets WHERE forgotten_ms < $1",
            &[&now.saturating_sub(idle_ms.saturating_mul(2))],
        )?;
        // A resumable session is kept while it is live (or for the idle timeout after it was
        // stored, before its first request is counted).
        client.execute(
            "DELETE FROM gateway_session_states s WHERE stored_ms < $1
               AND NOT EXISTS (SELECT 1 FROM gateway_sessions g WHERE g.id = s.id)",
            &[&now.saturating_sub(idle_ms)],
        )?;
        let as_u64 = |v: i64| u64::try_from(v).unwrap_or(0);
        let sessions = client
            .query(
                "SELECT id, agent, agent_type, client_name, client_version, generation,
                        protocol_version, started_ms, last_seen_ms, requests
                 FROM gateway_sessions",
                &[],
            )?
            .iter()
            .map(|r| SessionRecord {
                id: r.get(0),
                agent: r.get(1),
                agent_type: r.get(2),
                client_name: r.get(3),
                client_version: r.get(4),
                generation: if r.get::<_, String>(5) == "stateless" {
                    Generation::Stateless
                } else {
                    Generation::Stateful
                },
                protocol_version: r.get(6),
                started_ms: as_u64(r.get(7)),
                last_seen_ms: as_u64(r.get(8)),
                requests: as_u64(r.get(9)),
            })
            .collect();
        let calls = client
            .query(
                "SELECT agent, made, refused FROM gateway_session_calls",
                &[],
            )?
            .iter()
            .map(|r| {
                (
                    r.get::<_, String>(0),
                    CallCounts {
                        made: as_u64(r.get(1)),
                        refused: as_u64(r.get(2)),
                    },
                )
            })
            .collect();
        let ended = client
            .query("SELECT id, ended_ms FROM gateway_session_ends", &[])?
            .iter()
            .map(|r| (r.get::<_, String>(0), as_u64(r.get(1))))
            .collect();
        Ok(SessionSnapshot {
            sessions,
            calls,
            ended,
        })
    }

    fn ends(&self) -> tokio::sync::mpsc::UnboundedReceiver<String> {
        self.db.listen_on(SESSIONS_CHANNEL)
    }
}

/// 2025-11-25 sessions any replica can resume (kberg-server's [`kberg_server::SessionStore`]),
/// in the same database as the registry: a session an operator ended is never resumed.
#[derive(Debug, Clone)]
pub struct PgSessionStore {
    db: PgDatabase,
}

impl PgSessionStore {
    /// Migrates the tables (the registry's: they are one store).
    pub fn open(db: PgDatabase) -> Result<Self, GatewayError> {
        db.migrate(&SESSIONS_PG_MIGRATIONS)?;
        Ok(Self { db })
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&PgDatabase) -> Result<T, GatewayError> + Send + 'static,
    ) -> Result<T, kberg_server::SessionStoreFailure> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(|e| crate::error::task_failed("a session store task", &e))?
            .map_err(Into::into)
    }
}

#[async_trait::async_trait]
impl kberg_server::SessionStore for PgSessionStore {
    async fn load(
        &self,
        id: &str,
    ) -> Result<Option<kberg_server::StoredSession>, kberg_server::SessionStoreFailure> {
        let id = id.to_string();
        let row = self
            .blocking(move |db| {
                Ok(db.client()?.query_opt(
                    "SELECT owner, initialize FROM gateway_session_states s WHERE id = $1
                       AND NOT EXISTS (SELECT 1 FROM gateway_session_ends e WHERE e.id = $1)",
                    &[&id],
                )?)
            })
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let initialize: String = row.get(1);
        Ok(Some(kberg_server::StoredSession {
            owner: row.get(0),
            initialize: serde_json::from_str(&initialize)?,
        }))
    }

    async fn store(
        &self,
        id: &str,
        session: &kberg_server::StoredSession,
    ) -> Result<(), kberg_server::SessionStoreFailure> {
        let id = id.to_string();
        let owner = session.owner.clone();
        let initialize = session.initialize.to_string();
        self.blocking(move |db| {
            db.client()?.execute(
                "INSERT INTO gateway_session_states (id, owner, initialize, stored_ms)
                 VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
                &[&id, &owner, &initialize, &now_ms()],
            )?;
            Ok(())
        })
        .await
    }

    async fn delete(&self, id: &str) -> Result<(), kberg_server::SessionStoreFailure> {
        let id = id.to_string();
        self.blocking(move |db| {
            db.client()?
                .execute("DELETE FROM gateway_session_states WHERE id = $1", &[&id])?;
            Ok(())
        })
        .await
    }
}
