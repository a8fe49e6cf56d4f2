//! The Qdrant store sends a large upsert or replacement in batches, against a stand-in Qdrant
//! on 127.0.0.1, and a batch that fails stops it with an error saying how far it got.
//!
//! No Qdrant server runs here (`store_qdrant` is the ignored tier against a real one), so, as in
//! `store_qdrant_errors`, the stand-in speaks only what these tests need of Qdrant's gRPC wire
//! (HTTP/2 without TLS): `CollectionExists` and `Get` describe one collection of 4-dimension
//! cosine vectors; `Scroll` lists every point it holds in one page (it reads no filter);
//! `Upsert` and `Delete` store and remove points by id, and the upsert numbered `fail_upsert`
//! is refused. Each answer is a gRPC message with `grpc-status: 0` in its headers; a refusal is
//! "trailers-only", as gRPC servers refuse a call. Its protobuf messages are written and read
//! here by hand, field number by field number as Qdrant's `.proto` files give them.
#![cfg(feature = "qdrant")]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use bridle_memory::store::qdrant::{DELETE_BATCH_IDS, UPSERT_BATCH_POINTS};
use bridle_memory::{
    Filter, MemoryError, Payload, Point, PointId, QdrantConfig, QdrantStore, VectorStore,
};
use serde_json::json;
use tokio::net::TcpListener;

/// The stand-in's dimension.
const DIMENSION: u64 = 4;

/// What the stand-in holds and has been asked.
#[derive(Default)]
struct Held {
    /// The ids of the points stored.
    points: BTreeSet<PointId>,
    /// How many points each upsert request carried, in order (the refused one too).
    upserts: Vec<usize>,
    /// How many ids each delete request named.
    deletes: Vec<usize>,
    /// The upsert request (1 for the first) refused, if any.
    fail_upsert: Option<usize>,
    /// The delete request (1 for the first) refused, if any.
    fail_delete: Option<usize>,
}

type Shared = Arc<Mutex<Held>>;

/// The stand-in Qdrant on a free port; aborted when dropped (also when a test fails).
struct StandIn {
    addr: SocketAddr,
    held: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandIn {
    /// A stand-in holding the points `ids`, refusing the upsert request `fail_upsert`.
    async fn start(ids: impl IntoIterator<Item = PointId>, fail_upsert: Option<usize>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let held = Arc::new(Mutex::new(Held {
            points: ids.into_iter().collect(),
            fail_upsert,
            ..Held::default()
        }));
        let router = axum::Router::new()
            .fallback(answer)
            .with_state(Arc::clone(&held));
        // axum serves HTTP/2 without TLS to a client that opens with its preface, as tonic does.
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self { addr, held, task }
    }

    fn store(&self) -> QdrantStore {
        // Connecting reaches no server (`store_qdrant_errors` shows it), so it does not block
        // the stand-in on this runtime.
        QdrantStore::connect(QdrantConfig::new(format!("http://{}", self.addr)))
            .expect("a client is built")
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().expect("not poisoned")
    }
}

/// `v` as a protobuf varint.
fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// Field `tag` holding the varint `v`.
fn field_varint(tag: u64, v: u64) -> Vec<u8> {
    let mut out = varint(tag << 3);
    out.extend(varint(v));
    out
}

/// Field `tag` holding the length-delimited `bytes` (a message, a string).
fn field_bytes(tag: u64, bytes: &[u8]) -> Vec<u8> {
    let mut out = varint((tag << 3) | 2);
    out.extend(varint(bytes.len() as u64));
    out.extend_from_slice(bytes);
    out
}

/// A `PointId` message holding the number `id`.
fn point_id(id: PointId) -> Vec<u8> {
    field_varint(1, id)
}

/// A field of a message read: its number and its varint or its bytes.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// Reads a varint at the start of `buf`, advancing it.
fn read_varint(buf: &mut &[u8]) -> u64 {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first().expect("a varint's byte");
        *buf = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
    }
    v
}

/// The fields of the protobuf message `buf`, in order.
fn fields(mut buf: &[u8]) -> Vec<(u64, Field<'_>)> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = read_varint(&mut buf);
        let field = match key & 7 {
            0 => Field::Varint(read_varint(&mut buf)),
            1 | 5 => {
                let n = if key & 7 == 1 { 8 } else { 4 };
                buf = &buf[n..];
                Field::Fixed
            }
            2 => {
                let n = usize::try_from(read_varint(&mut buf)).expect("a length");
                let (bytes, rest) = buf.split_at(n);
                buf = rest;
                Field::Bytes(bytes)
            }
            other => panic!("wire type {other} is not used by these messages"),
        };
        out.push((key >> 3, field));
    }
    out
}

/// The messages in field `tag` of `buf`.
fn messages(buf: &[u8], tag: u64) -> Vec<&[u8]> {
    fields(buf)
        .into_iter()
        .filter_map(|(t, f)| match f {
            Field::Bytes(b) if t == tag => Some(b),
            _ => None,
        })
        .collect()
}

/// The number a `PointId` message holds.
fn read_point_id(buf: &[u8]) -> PointId {
    fields(buf)
        .into_iter()
        .find_map(|(t, f)| match f {
            Field::Varint(v) if t == 1 => Some(v),
            _ => None,
        })
        .expect("a numeric point id")
}

/// The ids of the points an `UpsertPoints` request carries (`points`: 3; `PointStruct.id`: 1).
fn upserted_ids(request: &[u8]) -> Vec<PointId> {
    messages(request, 3)
        .into_iter()
        .map(|p| read_point_id(messages(p, 1)[0]))
        .collect()
}

/// The ids a `DeletePoints` request names (`points`: 3, a `PointsSelector` whose `points`: 1
/// is a `PointsIdsList` of `ids`: 1).
fn deleted_ids(request: &[u8]) -> Vec<PointId> {
    messages(request, 3)
        .into_iter()
        .flat_map(|selector| messages(selector, 1))
        .flat_map(|list| messages(list, 1))
        .map(read_point_id)
        .collect()
}

/// A successful gRPC answer carrying `message`.
fn ok(message: Vec<u8>) -> Response {
    let mut framed = vec![0];
    framed.extend((message.len() as u32).to_be_bytes());
    framed.extend(message);
    Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .header("grpc-status", "0")
        .body(Body::from(framed))
        .expect("a response")
}

/// A refused gRPC call ("trailers-only"): RESOURCE_EXHAUSTED, which the client does not retry.
fn refused(message: &str) -> Response {
    Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .header("grpc-status", "8")
        .header("grpc-message", message)
        .body(Body::empty())
        .expect("a response")
}

/// An `UpdateResult` answer (`result`: 1, `status`: 2 = COMPLETED).
fn completed() -> Response {
    ok(field_bytes(1, &field_varint(2, 2)))
}

async fn answer(State(held): State<Shared>, uri: Uri, body: Bytes) -> Response {
    // The gRPC frame: a compression flag, the length, the message.
    let request = body.get(5..).unwrap_or_default();
    let mut held = held.lock().expect("not poisoned");
    match uri.path() {
        // `CollectionExistsResponse.result` (1) `exists` (1).
        "/qdrant.Collections/CollectionExists" => ok(field_bytes(1, &field_varint(1, 1))),
        // `GetCollectionInfoResponse.result` (1) `.config` (7) `.params` (1) `.vectors_config`
        // (5) `.params` (1): `size` (1), `distance` (2) = COSINE.
        "/qdrant.Collections/Get" => {
            let params = [field_varint(1, DIMENSION), field_varint(2, 1)].concat();
            let vectors = field_bytes(1, &params);
            let collection_params = field_bytes(5, &vectors);
            let config = field_bytes(1, &collection_params);
            ok(field_bytes(1, &field_bytes(7, &config)))
        }
        // `ScrollResponse.result` (2): `RetrievedPoint.id` (1); no next page.
        "/qdrant.Points/Scroll" => ok(held
            .points
            .iter()
            .flat_map(|id| field_bytes(2, &field_bytes(1, &point_id(*id))))
            .collect()),
        "/qdrant.Points/Upsert" => {
            let ids = upserted_ids(request);
            held.upserts.push(ids.len());
            if held.fail_upsert == Some(held.upserts.len()) {
                return refused("the update queue is full");
            }
            held.points.extend(ids);
            completed()
        }
        "/qdrant.Points/Delete" => {
            let ids = deleted_ids(request);
            held.deletes.push(ids.len());
            if held.fail_delete == Some(held.deletes.len()) {
                return refused("the update queue is full");
            }
            for id in ids {
                held.points.remove(&id);
            }
            completed()
        }
        other => refused(&format!("the stand-in does not answer {other}")),
    }
}

/// Points with the ids `ids`, each with a payload as a refresh writes it.
fn points(ids: impl IntoIterator<Item = PointId>) -> Vec<Point> {
    ids.into_iter()
        .map(|id| {
            let mut payload = Payload::new();
            payload.insert("reference_tag".into(), json!("tag"));
            payload.insert("text".into(), json!(format!("fn f{id}() {{}}")));
            Point {
                id,
                vector: vec![1.0, 0.0, 0.0, 0.0],
                payload,
            }
        })
        .collect()
}

fn tag() -> Filter {
    Filter::eq("reference_tag", "tag")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_replacement_goes_in_batches() {
    let old = 1..=10;
    let stand_in = StandIn::start(old, None).await;
    let n = 2 * UPSERT_BATCH_POINTS + 7;
    let new = 1_000..1_000 + n as PointId;
    let removed = stand_in
        .store()
        .replace("docs", &tag(), points(new.clone()))
        .await
        .expect("replaced");
    assert_eq!(removed, 10);
    let held = stand_in.held();
    assert_eq!(
        held.upserts,
        [UPSERT_BATCH_POINTS, UPSERT_BATCH_POINTS, 7],
        "one request per batch"
    );
    assert_eq!(
        held.deletes,
        [10],
        "the old points go once all new ones are in"
    );
    assert_eq!(held.points, new.collect::<BTreeSet<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_batch_stops_a_replacement_and_deletes_nothing() {
    // The old version's ids 1 to 10 are among the new version's first batch (a chunk that did
    // not move keeps its id); 11 to 20 are not.
    let old: Vec<PointId> = (1..=20).collect();
    let stand_in = StandIn::start(old.iter().copied(), Some(2)).await;
    let n = 3 * UPSERT_BATCH_POINTS;
    let new = (1..=10).chain(1_000..1_000 + (n - 10) as PointId);
    let err = stand_in
        .store()
        .replace("docs", &tag(), points(new))
        .await
        .expect_err("the second batch is refused");
    assert!(matches!(err, MemoryError::Store(_)), "{err:?}");
    let shown = err.to_string();
    for said in [
        format!("{UPSERT_BATCH_POINTS} of {n} new points were stored"),
        "none of the 20 old points was deleted, 10 of them overwritten".to_string(),
        "searches see the old version mixed with the new points stored".to_string(),
        "the update queue is full".to_string(),
    ] {
        assert!(shown.contains(&said), "{said:?} in {shown}");
    }
    let held = stand_in.held();
    assert_eq!(
        held.upserts,
        [UPSERT_BATCH_POINTS, UPSERT_BATCH_POINTS],
        "no batch after the failed one"
    );
    assert!(held.deletes.is_empty(), "{:?}", held.deletes);
    assert!(
        old.iter().all(|id| held.points.contains(id)),
        "every old point is still there"
    );
    assert_eq!(held.points.len(), 20 + UPSERT_BATCH_POINTS - 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_batch_stops_an_upsert_saying_how_many_were_stored() {
    let stand_in = StandIn::start([], Some(3)).await;
    let n = 4 * UPSERT_BATCH_POINTS;
    let err = stand_in
        .store()
        .upsert("docs", points(1..=n as PointId))
        .await
        .expect_err("the third batch is refused");
    assert!(matches!(err, MemoryError::Store(_)), "{err:?}");
    let shown = err.to_string();
    let stored = 2 * UPSERT_BATCH_POINTS;
    assert!(
        shown.contains(&format!("{stored} of {n} points were stored")),
        "{shown}"
    );
    assert!(shown.contains("the update queue is full"), "{shown}");
    let held = stand_in.held();
    assert_eq!(held.upserts.len(), 3, "{:?}", held.upserts);
    assert_eq!(held.points.len(), stored);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_old_points_are_deleted_in_batches_and_a_failed_one_says_how_far_it_got() {
    let n = 2 * DELETE_BATCH_IDS + 5;
    let old = 1..=n as PointId;
    let stand_in = StandIn::start(old.clone(), None).await;
    let new = 100_000..100_003;
    let removed = stand_in
        .store()
        .replace("docs", &tag(), points(new.clone()))
        .await
        .expect("replaced");
    assert_eq!(removed, n as u64);
    {
        let held = stand_in.held();
        assert_eq!(held.deletes, [DELETE_BATCH_IDS, DELETE_BATCH_IDS, 5]);
        assert_eq!(held.points, new.clone().collect::<BTreeSet<_>>());
    }

    // The second delete request refused: the first batch is gone, the rest kept, and the error
    // says so; no later request is sent.
    let stand_in = StandIn::start(old.clone(), None).await;
    stand_in.held().fail_delete = Some(2);
    let err = stand_in
        .store()
        .replace("docs", &tag(), points(new))
        .await
        .expect_err("the second delete is refused");
    let shown = err.to_string();
    assert!(
        shown.contains(&format!(
            "deleting the {n} old points they did not overwrite stopped after {DELETE_BATCH_IDS}"
        )),
        "{shown}"
    );
    assert!(shown.contains("the update queue is full"), "{shown}");
    {
        let held = stand_in.held();
        assert_eq!(held.deletes, [DELETE_BATCH_IDS, DELETE_BATCH_IDS]);
        assert_eq!(held.points.len(), n - DELETE_BATCH_IDS + 3);
    }

    // A plain delete the same way.
    let stand_in = StandIn::start(old, None).await;
    stand_in.held().fail_delete = Some(3);
    let err = stand_in
        .store()
        .delete("docs", &tag())
        .await
        .expect_err("the third delete is refused");
    let shown = err.to_string();
    assert!(
        shown.contains(&format!(
            "{} of {n} points were deleted",
            2 * DELETE_BATCH_IDS
        )),
        "{shown}"
    );
    assert_eq!(stand_in.held().points.len(), 5);
}
