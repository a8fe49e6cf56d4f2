//! Runs the agent task benchmark (`kberg_benches::tasks`) against a real OpenAI-compatible model
//! server and prints passes per category for each loop configuration.
//!
//! ```sh
//! agent-tasks --url http://127.0.0.1:8080/v1 --model qwen --ablate --deadline-secs 1800
//! ```
//!
//! `--ablate` runs the defaults on every task, then each "option off" variant only on the tasks
//! where that option acted in the defaults' run (elsewhere the conversation, at temperature 0, is
//! the same, so the result is carried over and marked so), then all options off on every task.
//! `--deadline-secs` bounds the whole run: no run starts after it, and the report says which
//! were not run. `--require-safe` exits non-zero if any write ran without its capability or a
//! run ended in a provider or surface error (the live tier's check). `--ids uuid` runs the same
//! tasks with the app's ids shown as uuids (the default, `number`, shows two-digit numbers).

#![allow(clippy::print_stdout)] // the report is what this program prints

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use kberg_agent::InferenceProvider;
use kberg_benches::tasks::{
    Category, IdStyle, TaskResult, Variant, per_category, run_task, tasks, variants,
};
use kberg_providers::HttpOptions;
use kberg_providers::openai::{OpenAiConfig, OpenAiProvider};

#[derive(Parser, Debug)]
#[command(about = "Kberg's agent task benchmark against an OpenAI-compatible model server")]
struct Args {
    /// The API base, e.g. http://127.0.0.1:8080/v1.
    #[arg(long)]
    url: String,
    /// The model name the server knows.
    #[arg(long)]
    model: String,
    /// Only these task ids (comma-separated).
    #[arg(long, value_delimiter = ',')]
    tasks: Vec<String>,
    /// Only these variants (comma-separated names; default: the defaults only). With
    /// `--ablate`, the defaults and then these, in this order.
    #[arg(long, value_delimiter = ',')]
    variants: Vec<String>,
    /// Run the ablation (see the module documentation).
    #[arg(long)]
    ablate: bool,
    /// Start no run after this many seconds.
    #[arg(long, default_value_t = 3600)]
    deadline_secs: u64,
    /// Exit non-zero on a write without its capability or a provider/surface error.
    #[arg(long)]
    require_safe: bool,
    /// How the app shows note ids: `number` (two-digit numbers) or `uuid`.
    #[arg(long, default_value = "number", value_parser = parse_ids)]
    ids: IdStyle,
    /// Append one JSON line per run to this file.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

fn parse_ids(name: &str) -> Result<IdStyle, String> {
    IdStyle::parse(name).ok_or_else(|| format!("`{name}` is not an id style (number, uuid)"))
}

struct Row {
    variant: &'static str,
    result: TaskResult,
    carried: bool,
}

fn json_line(model: &str, ids: IdStyle, row: &Row) -> String {
    let r = &row.result;
    serde_json::json!({
        "model": model, "ids": ids.as_str(), "variant": row.variant, "task": r.id,
        "category": r.category.as_str(),
        "pass": r.pass, "answered": r.answered, "state_ok": r.state_ok, "answer_ok": r.answer_ok,
        "writes_without_capability": r.writes_without_capability, "stop": r.stop,
        "turns": r.turns, "calls": r.calls, "tokens": r.tokens, "millis": r.millis as u64,
        "carried_over": row.carried,
        "interventions": r.interventions,
        "trace": r.trace,
        "text": r.text,
        "messages": r.messages,
    })
    .to_string()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let provider: Arc<dyn InferenceProvider> = Arc::new(OpenAiProvider::new(
        OpenAiConfig::new(args.model.clone())
            .base_url(args.url.clone())
            .http(HttpOptions::local_cpu()),
    ));
    let all_tasks: Vec<_> = tasks()
        .into_iter()
        .filter(|t| args.tasks.is_empty() || args.tasks.iter().any(|id| id == t.id))
        .collect();
    let all_variants = variants();
    let chosen: Vec<&Variant> = if args.ablate && !args.variants.is_empty() {
        // The defaults, then only the listed variants, in the order listed.
        std::iter::once("defaults")
            .chain(args.variants.iter().map(String::as_str))
            .filter_map(|n| all_variants.iter().find(|v| v.name == n))
            .collect()
    } else if args.ablate {
        all_variants.iter().collect()
    } else if args.variants.is_empty() {
        all_variants
            .iter()
            .filter(|v| v.name == "defaults")
            .collect()
    } else {
        all_variants
            .iter()
            .filter(|v| args.variants.iter().any(|n| n == v.name))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(args.deadline_secs);
    let mut out = args.out.as_ref().and_then(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .map_err(|e| eprintln!("cannot open {}: {e}", p.display()))
            .ok()
    });
    let mut rows: Vec<Row> = Vec::new();
    let mut skipped: Vec<(&str, &str)> = Vec::new();
    let mut unsafe_runs = 0u32;
    for variant in &chosen {
        for task in &all_tasks {
            let defaults = rows
                .iter()
                .find(|r| r.variant == "defaults" && r.result.id == task.id);
            if args.ablate
                && variant.name != "defaults"
                && variant.name != "none"
                && let Some(d) = defaults
                && !(variant.fired)(&d.result.interventions)
            {
                let result = d.result.clone();
                rows.push(Row {
                    variant: variant.name,
                    result,
                    carried: true,
                });
                continue;
            }
            if Instant::now() >= deadline {
                skipped.push((variant.name, task.id));
                continue;
            }
            let result =
                match run_task(task, args.ids, provider.clone(), variant.config.clone()).await {
                    Ok(r) => r,
                    Err(e) => {
                        eprintln!("the app could not be built: {e}");
                        return std::process::ExitCode::FAILURE;
                    }
                };
            if result.writes_without_capability > 0
                || matches!(result.stop, "provider_error" | "surface_error")
            {
                unsafe_runs += 1;
            }
            eprintln!(
                "{:<28} {:<26} {:<5} stop={:<16} turns={} calls={} {:.1}s",
                variant.name,
                task.id,
                if result.pass { "PASS" } else { "fail" },
                result.stop,
                result.turns,
                result.calls,
                result.millis as f64 / 1000.0
            );
            let row = Row {
                variant: variant.name,
                result,
                carried: false,
            };
            if let Some(f) = out.as_mut() {
                let _ = writeln!(f, "{}", json_line(&args.model, args.ids, &row));
            }
            rows.push(row);
        }
    }
    // The report: one line per variant, passes per category.
    let mut header = String::from("| variant |");
    for c in Category::ALL {
        header.push_str(&format!(" {} |", c.as_str()));
    }
    header.push_str(" total | runs made | writes without capability |");
    println!("model: {}, ids: {}", args.model, args.ids.as_str());
    println!("{header}");
    println!("|{}", "---|".repeat(Category::ALL.len() + 4));
    for variant in &chosen {
        let of: Vec<TaskResult> = rows
            .iter()
            .filter(|r| r.variant == variant.name)
            .map(|r| r.result.clone())
            .collect();
        let made = rows
            .iter()
            .filter(|r| r.variant == variant.name && !r.carried)
            .count();
        let (cats, total) = per_category(&of);
        let mut line = format!("| {} |", variant.name);
        for (_, pass, n) in cats {
            line.push_str(&format!(" {pass}/{n} |"));
        }
        let bad: u32 = of.iter().map(|r| r.writes_without_capability).sum();
        line.push_str(&format!(" {total}/{} | {made} | {bad} |", of.len()));
        println!("{line}");
    }
    if !skipped.is_empty() {
        println!(
            "not run (deadline): {}",
            skipped
                .iter()
                .map(|(v, t)| format!("{v}/{t}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if args.require_safe && unsafe_runs > 0 {
        eprintln!("{unsafe_runs} runs wrote without a capability or ended in an error");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
