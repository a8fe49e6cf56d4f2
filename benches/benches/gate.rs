//! The gate's cost against raw validation, and its cost as the registry grows.
//!
//! `gate/6_fields` runs the whole gate (lookup, projection and grant check, validation, dispatch
//! of a no-op Write tool, result) and `raw_validation/6_fields` only validates the same arguments
//! with a precompiled `jsonschema` validator: their ratio is the gate's overhead (goal <= 1.3x).
//! `gate_size/10` and `gate_size/10000` run the same call with 10 and 10,000 tools registered
//! (goal <= 1.1x). Arguments are cloned in the untimed setup of each batch; both sides own and
//! drop them inside the timed part.
//!
//! For instruction counts, `KBERG_GATE_LOOP=<n>` runs `n` calls of each side through the
//! never-inlined `measured_raw` / `measured_gate` (arguments built outside them) and exits, to
//! be run under `valgrind --tool=callgrind --toggle-collect='*measured_*'`; see
//! `benches/README.md`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group};
use kberg_core::{
    CallOptions, Caller, Grants, Principal, Tool, ToolBuilder, ToolOutput, ToolRegistry,
};

use kberg_benches::{note_args as args, note_schema as schema, notes_write as cap};

fn noop(name: String) -> Arc<dyn Tool> {
    Arc::new(
        ToolBuilder::new(name)
            .write(cap())
            .raw_handler(schema(), |_, _| async { Ok(ToolOutput::default()) }),
    )
}

fn registry(size: usize) -> ToolRegistry {
    let r = ToolRegistry::new();
    r.declare(cap()).expect("declare once");
    r.register_all((0..size).map(|i| noop(format!("tool_{i:05}"))))
        .expect("distinct names");
    r
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
            args,
            |a| {
                let r = futures::executor::block_on(small.call(
                    &caller,
                    "tool_00007",
                    a,
                    CallOptions::default(),
                ));
                black_box(r.is_ok())
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();

    let mut g = c.benchmark_group("gate_size");
    for size in [10usize, 10_000] {
        let r = registry(size);
        g.bench_function(format!("{size}"), |b| {
            b.iter_batched(
                args,
                |a| {
                    let out = futures::executor::block_on(r.call(
                        &caller,
                        "tool_00007",
                        a,
                        CallOptions::default(),
                    ));
                    black_box(out.is_ok())
                },
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
fn measured_gate(r: &ToolRegistry, caller: &Caller, a: serde_json::Value) -> bool {
    futures::executor::block_on(r.call(caller, "tool_00007", a, CallOptions::default())).is_ok()
}

/// `n` calls of each side, for an instruction counter; both must succeed.
fn count_loop(n: usize) {
    let caller = Caller::new(Principal::new("bench").with_grants(Grants::of(["notes.write"])));
    let validator = jsonschema::validator_for(&schema()).expect("valid schema");
    let small = registry(10);
    for _ in 0..n {
        assert!(measured_raw(&validator, args()));
    }
    for _ in 0..n {
        assert!(measured_gate(&small, &caller, args()));
    }
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
