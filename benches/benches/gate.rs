//! The gate's cost against raw validation, and its cost as the registry grows.
//!
//! `gate/6_fields` runs the whole gate (lookup, projection and grant check, validation, dispatch
//! of a no-op Write tool, result) and `raw_validation/6_fields` only validates the same arguments
//! with a precompiled `jsonschema` validator: their ratio is the gate's overhead (goal <= 1.3x).
//! `gate_sync/6_fields` is the same call to the same no-op tool written with a synchronous
//! handler ([`ToolBuilder::raw_sync_handler`]), which the gate runs without a boxed future.
//! `gate_size/10` and `gate_size/10000` run the same call with 10 and 10,000 tools registered
//! (goal <= 1.1x). Arguments and call options are built in the untimed setup of each batch;
//! both sides own and drop them inside the timed part. The gate's future is polled once with a
//! no-op waker (`now_or_never`), as the task that awaits it would poll it: no executor is
//! timed, and a gate future that did not finish on its first poll fails the bench.
//!
//! For instruction counts, `KBERG_GATE_LOOP=<n>` runs `n` calls of each side through the
//! never-inlined `measured_raw` / `measured_gate` / `measured_gate_sync` (inputs built outside
//! them), prints each side's wall time per call and exits, to
//! be run under `valgrind --tool=callgrind --toggle-collect='*measured_*'`; see
//! `benches/README.md`.

// The counting mode's wall figures are its report, on stdout.
#![allow(clippy::print_stdout)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group};
use futures::FutureExt;
use kberg_core::{
    CallOptions, Caller, Grants, Principal, Tool, ToolBuilder, ToolOutput, ToolRegistry,
};

use kberg_benches::{note_args as args, note_schema as schema, notes_write as cap};

/// With the `mimalloc` feature, the allocator the `bridle` binary runs with.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn noop(name: String) -> Arc<dyn Tool> {
    Arc::new(
        ToolBuilder::new(name)
            .write(cap())
            .raw_handler(schema(), |_, _| async { Ok(ToolOutput::default()) }),
    )
}

fn noop_sync(name: String) -> Arc<dyn Tool> {
    Arc::new(
        ToolBuilder::new(name)
            .write(cap())
            .raw_sync_handler(schema(), |_, _| Ok(ToolOutput::default())),
    )
}

fn registry_of(size: usize, tool: fn(String) -> Arc<dyn Tool>) -> ToolRegistry {
    let r = ToolRegistry::new();
    r.declare(cap()).expect("declare once");
    r.register_all((0..size).map(|i| tool(format!("tool_{i:05}"))))
        .expect("distinct names");
    r
}

fn registry(size: usize) -> ToolRegistry {
    registry_of(size, noop)
}

/// Arguments and options for one call, built outside the timed part.
fn inputs() -> (serde_json::Value, CallOptions) {
    (args(), CallOptions::default())
}

/// One gate call, polled once; the gate's future must finish on that poll.
fn gate_once(
    r: &ToolRegistry,
    caller: &Caller,
    (a, opts): (serde_json::Value, CallOptions),
) -> bool {
    r.call(caller, "tool_00007", a, opts)
        .now_or_never()
        .expect("a no-op tool's call finishes on its first poll")
        .is_ok()
}

fn bench(c: &mut Criterion) {
    let caller = Caller::new(Principal::new("bench").with_grants(Grants::of(["notes.write"])));
    let validator = jsonschema::validator_for(&schema()).expect("valid schema");

    let mut g = c.benchmark_group("overhead");
    g.bench_function("raw_validation/6_fields", |b| {
        b.iter_batched(
            args,
            // Like the gate, the baseline owns the arguments and drops them: any dispatch
            // hands its arguments on and frees them, so both sides pay for that.
            |a| {
                let valid = validator.is_valid(black_box(&a));
                drop(a);
                black_box(valid)
            },
            BatchSize::SmallInput,
        )
    });
    let small = registry(10);
    g.bench_function("gate/6_fields", |b| {
        b.iter_batched(
            inputs,
            |i| black_box(gate_once(&small, &caller, i)),
            BatchSize::SmallInput,
        )
    });
    let small_sync = registry_of(10, noop_sync);
    g.bench_function("gate_sync/6_fields", |b| {
        b.iter_batched(
            inputs,
            |i| black_box(gate_once(&small_sync, &caller, i)),
            BatchSize::SmallInput,
        )
    });
    g.finish();

    let mut g = c.benchmark_group("gate_size");
    for size in [10usize, 10_000] {
        let r = registry(size);
        g.bench_function(format!("{size}"), |b| {
            b.iter_batched(
                inputs,
                |i| black_box(gate_once(&r, &caller, i)),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

/// One raw validation of owned arguments, as the criterion baseline does it.
#[inline(never)]
fn measured_raw(validator: &jsonschema::Validator, a: serde_json::Value) -> bool {
    let valid = validator.is_valid(black_box(&a));
    drop(a);
    valid
}

/// One gate call, as the criterion bench does it.
#[inline(never)]
fn measured_gate(r: &ToolRegistry, caller: &Caller, i: (serde_json::Value, CallOptions)) -> bool {
    gate_once(r, caller, i)
}

/// One gate call to the synchronous no-op tool. (It calls another of the registry's tools
/// than [`measured_gate`] so that the two functions are not folded into one.)
#[inline(never)]
fn measured_gate_sync(
    r: &ToolRegistry,
    caller: &Caller,
    (a, opts): (serde_json::Value, CallOptions),
) -> bool {
    r.call(caller, "tool_00008", a, opts)
        .now_or_never()
        .expect("a no-op tool's call finishes on its first poll")
        .is_ok()
}

/// `n` calls of each side, for an instruction counter; all must succeed. Prints each side's
/// wall time per call (building the inputs included, the same on every side).
fn count_loop(n: usize) {
    let caller = Caller::new(Principal::new("bench").with_grants(Grants::of(["notes.write"])));
    let validator = jsonschema::validator_for(&schema()).expect("valid schema");
    let small = registry(10);
    let small_sync = registry_of(10, noop_sync);
    let per_call = |t: std::time::Instant| t.elapsed().as_nanos() as f64 / n as f64;
    let t = std::time::Instant::now();
    for _ in 0..n {
        assert!(measured_raw(&validator, args()));
    }
    let raw = per_call(t);
    let t = std::time::Instant::now();
    for _ in 0..n {
        assert!(measured_gate(&small, &caller, inputs()));
    }
    let gate = per_call(t);
    let t = std::time::Instant::now();
    for _ in 0..n {
        assert!(measured_gate_sync(&small_sync, &caller, inputs()));
    }
    let sync = per_call(t);
    println!(
        "ns per call: raw {raw:.0}, gate {gate:.0} ({:.2}x), gate_sync {sync:.0} ({:.2}x)",
        gate / raw,
        sync / raw
    );
}

criterion_group!(benches, bench);

fn main() {
    // The bench binary is an edge: reading its own switch from the environment is its job.
    if let Some(n) = std::env::var("KBERG_GATE_LOOP")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        count_loop(n);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
