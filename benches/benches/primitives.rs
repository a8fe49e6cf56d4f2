//! What the primitives cost on the call path, each against the same call without it, same run.
//!
//! - `audit/none`, `audit/memory`, `audit/jsonl`: the gate's no-op 6-field Write call with no
//!   audit sink, with the in-memory sink (a clone under a mutex), and with the JSON Lines sink
//!   (argument digest, event clone, channel send; the writer thread does the I/O). The ratio
//!   jsonl / none is what the audit log adds to a call.
//! - `handles/plain_id` vs `handles/handle`: a call whose one argument is a plain string id,
//!   against the same call where it is a handle the gate authenticates and decrypts.
//! - `handles/mint`: minting one handle (for a result).
//! - `preview/direct` vs `preview/preview_then_commit`: one direct write against the two calls
//!   of a previewed write (dry run, token issued; commit, token checked and spent).
//! - `visibility/none`, `visibility/allow_all`, `visibility/mapped`: the same write call on a
//!   registry without a `ToolVisibility`, with one that shows everything, and with one that
//!   looks the caller up in a per-tool map behind a lock (what a gateway's mapping does); and
//!   `visibility/list_none` vs `visibility/list_mapped`: listing 100 tools without and with
//!   that map (every tool named in it, all shown to the caller, so both list the same).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use kberg_core::{
    COMMIT_TOKEN_FIELD, CallOptions, Caller, FlushPolicy, Grants, HandleCodec, JsonlAuditSink,
    MemoryAuditSink, Principal, ToolBuilder, ToolOutput, ToolRegistry, ToolRegistryBuilder,
    ToolSpec, ToolVisibility,
};
use serde_json::{Value, json};

use kberg_benches::{note_args as args, note_schema as schema, notes_write as cap};

fn registry() -> ToolRegistry {
    registry_with(ToolRegistry::builder())
}

fn registry_with(builder: ToolRegistryBuilder) -> ToolRegistry {
    let r = builder
        .handle_codec(HandleCodec::new("bench", &[9u8; 32]).expect("32-byte secret"))
        .build();
    r.declare(cap()).expect("declare once");
    r.register(
        ToolBuilder::new("add_note")
            .write(cap())
            .raw_handler(schema(), |_, _| async { Ok(ToolOutput::default()) }),
    )
    .expect("register");
    r.register(
        ToolBuilder::new("add_note_previewed")
            .write(cap())
            .previews()
            .raw_handler(schema(), |_, _| async { Ok(ToolOutput::default()) }),
    )
    .expect("register");
    for (name, id_schema) in [
        ("open_plain", json!({"type": "string"})),
        (
            "open_handle",
            json!({"type": "string", "x-kberg-handle": "note"}),
        ),
    ] {
        r.register(ToolBuilder::new(name).raw_handler(
            json!({"type": "object", "properties": {"note": id_schema}, "required": ["note"]}),
            |_, _| async { Ok(ToolOutput::default()) },
        ))
        .expect("register");
    }
    r
}

/// Who may know of which tool, behind a lock as a live mapping is: tool name to principals.
/// A tool it does not name is shown to everyone.
struct Mapped(std::sync::RwLock<std::collections::HashMap<String, Vec<String>>>);

impl Mapped {
    fn new(entries: impl IntoIterator<Item = (String, Vec<String>)>) -> Self {
        Self(std::sync::RwLock::new(entries.into_iter().collect()))
    }
}

impl ToolVisibility for Mapped {
    fn visible(&self, tool: &ToolSpec, caller: &Caller) -> bool {
        let map = self
            .0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match map.get(&tool.name) {
            None => true,
            Some(who) => who.iter().any(|p| *p == caller.principal().id),
        }
    }
}

/// 100 read tools `t000`..`t099`.
fn hundred(builder: ToolRegistryBuilder) -> ToolRegistry {
    let r = builder.build();
    r.register_all((0..100).map(|i| {
        Arc::new(
            ToolBuilder::new(format!("t{i:03}"))
                .read()
                .raw_handler(schema(), |_, _| async { Ok(ToolOutput::default()) }),
        ) as Arc<dyn kberg_core::Tool>
    }))
    .expect("distinct names");
    r
}

fn call(r: &ToolRegistry, caller: &Caller, tool: &str, a: Value) -> Result<ToolOutput, String> {
    futures::executor::block_on(r.call(caller, tool, a, CallOptions::default()))
        .map_err(|e| e.to_string())
}

fn bench(c: &mut Criterion) {
    let caller = Caller::new(Principal::new("bench").with_grants(Grants::of(["notes.write"])));

    let mut g = c.benchmark_group("audit");
    let none = registry();
    g.bench_function("none", |b| {
        b.iter_batched(
            args,
            |a| black_box(call(&none, &caller, "add_note", a).is_ok()),
            BatchSize::SmallInput,
        )
    });
    let mem_sink = Arc::new(MemoryAuditSink::new());
    let memory = registry_with(ToolRegistry::builder().audit_sink(mem_sink.clone()));
    g.bench_function("memory", |b| {
        b.iter_batched(
            args,
            |a| black_box(call(&memory, &caller, "add_note", a).is_ok()),
            BatchSize::SmallInput,
        )
    });
    let path = std::env::temp_dir().join(format!("kberg-bench-audit-{}.jsonl", std::process::id()));
    {
        let sink = Arc::new(JsonlAuditSink::open(&path, FlushPolicy::default()).expect("open log"));
        let jsonl = registry_with(ToolRegistry::builder().audit_sink(sink.clone()));
        g.bench_function("jsonl", |b| {
            b.iter_batched(
                args,
                |a| black_box(call(&jsonl, &caller, "add_note", a).is_ok()),
                BatchSize::SmallInput,
            )
        });
        drop(jsonl);
        sink.flush().expect("flush");
        if sink.dropped() > 0 {
            eprintln!("audit/jsonl: {} events dropped (overflow)", sink.dropped());
        }
    }
    let _ = std::fs::remove_file(&path);
    g.finish();

    let r = registry();
    let codec = r.handle_codec().expect("codec set");
    let handle = codec
        .mint("bench", "note", "notes/row-000041", None)
        .expect("mint");
    let mut g = c.benchmark_group("handles");
    g.bench_function("plain_id", |b| {
        b.iter_batched(
            || json!({"note": "notes/row-000041"}),
            |a| black_box(call(&r, &caller, "open_plain", a).is_ok()),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("handle", |b| {
        b.iter_batched(
            || json!({"note": handle}),
            |a| black_box(call(&r, &caller, "open_handle", a).is_ok()),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("mint", |b| {
        b.iter(|| black_box(codec.mint("bench", "note", black_box("notes/row-000041"), None)))
    });
    g.finish();

    let mut g = c.benchmark_group("preview");
    g.bench_function("direct", |b| {
        b.iter_batched(
            args,
            |a| black_box(call(&r, &caller, "add_note", a).is_ok()),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("preview_then_commit", |b| {
        b.iter_batched(
            || (args(), args()),
            |(a, mut commit)| {
                let preview = call(&r, &caller, "add_note_previewed", a).expect("preview");
                let token = preview
                    .structured
                    .and_then(|s| s.get(COMMIT_TOKEN_FIELD).cloned())
                    .expect("token");
                commit[COMMIT_TOKEN_FIELD] = token;
                black_box(call(&r, &caller, "add_note_previewed", commit).is_ok())
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();

    let mut g = c.benchmark_group("visibility");
    let none = registry();
    let allow_all =
        registry_with(ToolRegistry::builder().tool_visibility(|_: &ToolSpec, _: &Caller| true));
    let mapped = registry_with(ToolRegistry::builder().tool_visibility(Mapped::new([(
        "add_note".to_string(),
        vec!["other".to_string(), "bench".to_string()],
    )])));
    for (name, r) in [
        ("none", &none),
        ("allow_all", &allow_all),
        ("mapped", &mapped),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched(
                args,
                |a| black_box(call(r, &caller, "add_note", a).is_ok()),
                BatchSize::SmallInput,
            )
        });
    }
    let list_none = hundred(ToolRegistry::builder());
    // Every tool named, the caller second in each list: the same 100 tools listed, so the
    // ratio is the filter's own cost.
    let all_named = Mapped::new((0..100).map(|i| {
        (
            format!("t{i:03}"),
            vec!["other".to_string(), "bench".to_string()],
        )
    }));
    let list_mapped = hundred(ToolRegistry::builder().tool_visibility(all_named));
    assert_eq!(list_none.list(&caller).len(), 100);
    assert_eq!(list_mapped.list(&caller).len(), 100);
    g.bench_function("list_none", |b| {
        b.iter(|| black_box(list_none.list(&caller)))
    });
    g.bench_function("list_mapped", |b| {
        b.iter(|| black_box(list_mapped.list(&caller)))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
