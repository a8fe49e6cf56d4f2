//! The gateway's panic hook: a panic reaches the log as one event naming the thread and the
//! code location, and its message (which may quote the data the code failed on) only when the
//! operator opts in.

use bridle_gateway::logging::{PanicMessages, install_panic_hook, log_targets};
use kberg_testkit::log::LogBuffer;

const CANARY: &str = "canary-panic-9b1f3c7e";

/// Panics on a thread named `name` with a message quoting the canary, and waits for it.
fn panic_on_thread(name: &str) {
    let joined = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(|| {
            let quoted = format!("token {CANARY}");
            panic!("failed on {quoted}");
        })
        .expect("spawn the panicking thread")
        .join();
    assert!(joined.is_err(), "the thread panicked");
}

// One test: the hook and the global subscriber are process-wide.
#[test]
fn a_panic_is_logged_by_location_and_its_message_only_on_request() {
    let logs = LogBuffer::default();
    logs.install_global(log_targets("warn"));

    install_panic_hook(PanicMessages::Withheld);
    panic_on_thread("withheld-worker");
    let text = logs.text();
    assert!(text.contains("a thread panicked"), "{text}");
    assert!(
        text.contains("withheld-worker"),
        "the thread is named: {text}"
    );
    assert!(
        text.contains("tests/panic_hook.rs:"),
        "the location is named: {text}"
    );
    assert!(text.contains("BRIDLE_LOG_PANIC_MESSAGES"), "{text}");
    assert!(!text.contains(CANARY), "the message is withheld: {text}");

    install_panic_hook(PanicMessages::Logged);
    panic_on_thread("logged-worker");
    let text = logs.text();
    let logged = text
        .lines()
        .find(|l| l.contains("logged-worker"))
        .unwrap_or_else(|| panic!("the second panic is logged: {text}"));
    assert!(
        logged.contains(CANARY),
        "the message is logged on request: {logged}"
    );
    let _ = std::panic::take_hook();
}

#[test]
fn the_opt_in_reads_one_and_true_only() {
    for on in ["1", "true", "TRUE", " 1 "] {
        assert_eq!(
            PanicMessages::from_env_value(Some(on)),
            PanicMessages::Logged,
            "{on:?}"
        );
    }
    for off in [None, Some(""), Some("0"), Some("false"), Some("yes")] {
        assert_eq!(
            PanicMessages::from_env_value(off),
            PanicMessages::Withheld,
            "{off:?}"
        );
    }
}
