//! A file that never ends, for the tests of readers that must stop at a limit: a named pipe
//! whose writer sends far more than any such file holds and then keeps it open, as a pipe or a
//! device given by mistake does.

#![allow(dead_code)] // Each test file uses part of it.

use std::io::Write;
use std::path::Path;
use std::sync::mpsc;

/// Makes the named pipe `dir/name` (with `mkfifo`), and answers its path.
pub fn make_pipe(dir: &Path, name: &str) -> std::path::PathBuf {
    let fifo = dir.join(name);
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo made the pipe");
    fifo
}

/// Runs `read` on a pipe called `name` whose writer sends `chunk` `times` times and then holds
/// it open. Answers what `read` returned, or `None` when it did not return within
/// [`kberg_testkit::WAIT`] (it waited for the end of the file). Both threads end either way.
pub fn read_endless<T: Send + 'static>(
    name: &str,
    chunk: Vec<u8>,
    times: usize,
    read: impl FnOnce(&Path) -> T + Send + 'static,
) -> Option<T> {
    let dir = tempfile::tempdir().expect("temp dir");
    let fifo = make_pipe(dir.path(), name);
    let (stop, stopped) = mpsc::channel::<()>();
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut pipe = std::fs::OpenOptions::new()
                .write(true)
                .open(&fifo)
                .expect("open the pipe");
            for _ in 0..times {
                if pipe.write_all(&chunk).is_err() {
                    break; // the reader stopped reading: what is wanted
                }
            }
            let _ = stopped.recv();
        })
    };
    let (answer, answered) = mpsc::channel();
    let fifo_path = fifo.clone();
    let reader = std::thread::spawn(move || {
        let _ = answer.send(read(&fifo));
    });
    let outcome = answered.recv_timeout(kberg_testkit::WAIT).ok();
    // Whatever happened, let both threads end. A reader that refused the pipe without opening
    // it leaves the writer waiting in `open` for one, and one that stopped reading may leave it
    // waiting for room: the pipe is opened here and read to its end. It is opened before the
    // writer is told to stop, while the writer holds it or waits for a reader, so this open
    // does not wait for a writer that is gone.
    let drain = std::fs::File::open(&fifo_path).expect("open the pipe to drain it");
    let _ = stop.send(());
    std::io::copy(&mut &drain, &mut std::io::sink()).expect("drain the pipe");
    writer.join().expect("the writer ends");
    reader.join().expect("the reader ends");
    outcome
}
