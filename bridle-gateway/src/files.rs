//! Reading the small files that hold secrets: bounded in length, so a device that never ends
//! or a huge file given by mistake is refused from its first bytes.
//!
//! Two rules, one function each:
//! - a file named on its own at start (the admin token file, the vault's master key),
//!   [`read_waiting`]: a named pipe is allowed (`<(...)`, a secrets agent writing it), and its
//!   writer waited for at most [`PIPE_WAIT`], since one nothing writes to would hold
//!   `bridle serve` at start for ever, saying nothing;
//! - a file of a secrets folder (the data directory's `secrets/`, read for agents' and memory's
//!   `token_secret`, for `file:` references and bare names, and the `docker:` folder),
//!   [`read_folder_secret`]: a regular file (or a link to one) only. A folder's secrets are
//!   versioned by their files' modification times and read again on a rotation, while calls
//!   wait on the async runtime, so a pipe or a device (a mount gone wrong) is refused before it
//!   is opened, whoever reads it.

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

/// Why a file of a secrets folder could not be read by [`read_folder_secret`]; each caller
/// words it in its own error type.
#[derive(Debug)]
pub(crate) enum FileProblem {
    /// There is no such file.
    Missing,
    /// It is a pipe, a device, a socket or a folder, which is never opened: opening a pipe
    /// waits for a writer, and reading a device may never end.
    NotRegular,
    /// Reading failed.
    Io(std::io::Error),
}

impl FileProblem {
    /// The problem as an I/O error, for errors that carry one.
    pub(crate) fn into_io(self) -> std::io::Error {
        match self {
            Self::Missing => std::io::Error::from(std::io::ErrorKind::NotFound),
            Self::NotRegular => std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "it is not a regular file (a pipe, a device or a folder); a secrets folder holds files",
            ),
            Self::Io(e) => e,
        }
    }
}

/// Reads the secret file `path` of a secrets folder, with its metadata: only a regular file
/// (or a link to one), and at most `max + 1` bytes (one more than the longest read, so a
/// longer file is known to be one). A pipe or a device is refused before it is opened, instead
/// of holding the reading thread until a writer comes or the stream ends.
pub(crate) fn read_folder_secret(
    path: &Path,
    max: u64,
) -> Result<(Zeroizing<Vec<u8>>, std::fs::Metadata), FileProblem> {
    use std::io::Read;
    let problem = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => FileProblem::Missing,
        _ => FileProblem::Io(e),
    };
    if !std::fs::metadata(path).map_err(problem)?.is_file() {
        return Err(FileProblem::NotRegular);
    }
    let file = std::fs::File::open(path).map_err(problem)?;
    // Checked again on what was opened: the path may have been replaced meanwhile.
    let meta = file.metadata().map_err(FileProblem::Io)?;
    if !meta.is_file() {
        return Err(FileProblem::NotRegular);
    }
    let mut raw = Zeroizing::new(Vec::new());
    file.take(max.saturating_add(1))
        .read_to_end(&mut raw)
        .map_err(FileProblem::Io)?;
    Ok((raw, meta))
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
