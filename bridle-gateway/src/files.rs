//! Reading the small files that hold secrets at start (the admin token file, the `secrets/`
//! files, the vault's master key): bounded in length, so a device that never ends or a huge
//! file given by mistake is refused from its first bytes, and a named pipe's writer waited for
//! at most [`PIPE_WAIT`]. A pipe is allowed (`<(...)`, a secrets agent writing it), but one
//! nothing writes to would hold `bridle serve` at start for ever, saying nothing.

use std::path::Path;
use std::time::Duration;

use zeroize::Zeroizing;

/// How long reading a secret file that is a named pipe waits for its writer: 30 seconds; past
/// it the read fails with `TimedOut`, saying so.
pub const PIPE_WAIT: Duration = Duration::from_secs(30);

/// At most `max + 1` bytes of `path` (one more than the longest read, so a longer file is
/// known to be one).
pub(crate) fn read_bounded(path: &Path, max: u64) -> std::io::Result<Zeroizing<Vec<u8>>> {
    use std::io::Read;
    let mut raw = Zeroizing::new(Vec::new());
    std::fs::File::open(path)?
        .take(max.saturating_add(1))
        .read_to_end(&mut raw)?;
    Ok(raw)
}

/// [`read_bounded`], waiting at most `wait` when `path` is a named pipe: its open and its reads
/// block until a writer comes and goes, so they run on a thread of their own. When the wait is
/// over, a writer is opened and closed on another thread so that the reader's open returns
/// and the thread ends (a writer that came and hangs keeps it, in a process about to stop).
#[cfg(unix)]
pub(crate) fn read_waiting(
    path: &Path,
    max: u64,
    wait: Duration,
) -> std::io::Result<Zeroizing<Vec<u8>>> {
    use std::os::unix::fs::FileTypeExt;
    if !std::fs::metadata(path)?.file_type().is_fifo() {
        return read_bounded(path, max);
    }
    let (answer, answered) = std::sync::mpsc::sync_channel(1);
    let owned = path.to_path_buf();
    std::thread::Builder::new()
        .name("bridle-secret-pipe".into())
        .spawn(move || {
            let _ = answer.send(read_bounded(&owned, max));
        })?;
    match answered.recv_timeout(wait) {
        Ok(read) => read,
        Err(_) => {
            let owned = path.to_path_buf();
            let _ = std::thread::Builder::new()
                .name("bridle-secret-pipe-end".into())
                .spawn(move || drop(std::fs::OpenOptions::new().write(true).open(owned)));
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "a named pipe nothing wrote to within {} s; give the secret in a regular file, or start its writer first",
                    wait.as_secs_f64()
                ),
            ))
        }
    }
}

/// [`read_bounded`]: elsewhere a named pipe is not told apart.
#[cfg(not(unix))]
pub(crate) fn read_waiting(
    path: &Path,
    max: u64,
    _wait: Duration,
) -> std::io::Result<Zeroizing<Vec<u8>>> {
    read_bounded(path, max)
}

/// A named pipe in `dir`, for tests.
#[cfg(all(test, unix))]
pub(crate) fn test_fifo(dir: &Path) -> std::path::PathBuf {
    let fifo = dir.join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    fifo
}
