//! A broken audit log for the failure-path tests: every insert into the gateway's audit table
//! in `audit.db` fails, as a full disk or a damaged table would make it, until it is repaired.
//! The gateway's own connection sees the change on its next write.

#![allow(dead_code)] // Each test file uses part of it.

use std::path::Path;

/// Makes every audit insert fail.
pub fn break_audit(data_dir: &Path) {
    rusqlite::Connection::open(data_dir.join("audit.db"))
        .expect("open the audit database")
        .execute_batch(
            "CREATE TRIGGER fail_audit BEFORE INSERT ON gateway_audit
             BEGIN SELECT RAISE(ABORT, 'the disk is full'); END;",
        )
        .expect("break the audit table");
}

/// Undoes [`break_audit`].
pub fn repair_audit(data_dir: &Path) {
    rusqlite::Connection::open(data_dir.join("audit.db"))
        .expect("open the audit database")
        .execute_batch("DROP TRIGGER fail_audit")
        .expect("repair the audit table");
}
