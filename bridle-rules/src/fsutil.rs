//! Atomic file writes and UTC timestamps.
//!
//! A rules file is the source of truth and users keep it in git, so a crash must never leave it
//! half-written: [`write_atomic`] writes a temporary file beside the target, flushes it to disk,
//! renames it over the target (atomic on POSIX filesystems) and flushes the directory so the
//! rename itself survives a power cut. Each call has its own temporary file (process id and a
//! per-process counter), because writers in one process may overlap: with PostgreSQL the files
//! are copies written after each commit and by the change watcher, and two writers sharing one
//! temporary file could rename the other's half-written bytes into place. Timestamps are RFC 3339 in UTC, computed from the system
//! clock without a date library.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::RulesError;

/// Writes `bytes` to `path` atomically: readers see the old file or the new one, never a mix.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RulesError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).map_err(|e| RulesError::io(dir, e))?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{file_name}.tmp-{}-{}",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        // Persist the rename: fsync the directory entry (not possible on every platform).
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    result.map_err(|e: std::io::Error| {
        let _ = std::fs::remove_file(&tmp);
        RulesError::io(path, e)
    })
}

/// The current time as RFC 3339 UTC with second precision (`2026-11-29T21:50:04Z`).
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

/// Formats seconds since the Unix epoch as RFC 3339 UTC.
pub fn rfc3339(secs: u64) -> String {
    let secs = i64::try_from(secs).unwrap_or(i64::MAX);
    chrono::DateTime::<chrono::Utc>::from_timestamp(secs, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_798_580_004), "2026-12-29T21:33:24Z");
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/a.yaml");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two");
        let names: Vec<_> = std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn overlapping_writers_in_one_process_each_replace_the_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("demo.yaml");
        let texts: Vec<String> = (0..8)
            .map(|i| format!("{i}").repeat(64 * 1024 + i))
            .collect();
        std::thread::scope(|s| {
            for t in &texts {
                let p = &p;
                s.spawn(move || {
                    for _ in 0..20 {
                        write_atomic(p, t.as_bytes()).unwrap();
                    }
                });
            }
        });
        let now = std::fs::read_to_string(&p).unwrap();
        assert!(texts.contains(&now), "a mixed file of {} bytes", now.len());
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from("demo.yaml")]);
    }
}
