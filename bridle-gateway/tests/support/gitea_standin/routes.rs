//! The stand-in's routes: `/api/v1` paths to answers, with Gitea's order of checks (the
//! repository must be visible before anything else is looked at, a write needs a signed-in
//! user) and the reads; the writes are in `writes`.

use axum::http::{Method, StatusCode};
use serde_json::{Map, Value, json};

use super::model::{Instance, Repo, now};
use super::render::Render;
use super::writes::{
    create_branch, create_issue, create_pull, create_release, edit_issue, merge, replace_labels,
    write_file,
};
use super::{Ask, GITEA_VERSION, Paging, Reply, api_error, not_found};

/// Answers one request against the instance.
pub(super) fn answer(db: &mut Instance, ask: &Ask<'_>) -> Reply {
    let Some(rest) = ask.path.strip_prefix("/api/v1/") else {
        return not_found(ask.base, &[]);
    };
    let segs: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    let get = ask.method == Method::GET;
    match segs.as_slice() {
        ["version"] if get => Reply::json(StatusCode::OK, json!({"version": GITEA_VERSION})),
        ["user"] if get => match ask.viewer {
            Some(v) => Reply::json(StatusCode::OK, render(db, ask).user(v)),
            None => token_required(ask),
        },
        ["user", "repos"] if get => match ask.viewer {
            Some(v) => {
                let repos = db
                    .repos
                    .iter()
                    .filter(|r| db.can_read(r, Some(v)))
                    .map(|r| render(db, ask).repository(r))
                    .collect();
                Paging::of(ask.query).reply(ask.base, ask.path, ask.query, repos)
            }
            None => token_required(ask),
        },
        ["users", owner, "repos"] | ["orgs", owner, "repos"] => {
            let wants_org = segs[0] == "orgs";
            match db.account(owner) {
                Some(a) if get && (a.is_org || !wants_org) => {
                    let login = a.login.clone();
                    let repos = db
                        .repos
                        .iter()
                        .filter(|r| r.owner == login && db.can_read(r, ask.viewer))
                        .map(|r| render(db, ask).repository(r))
                        .collect();
                    Paging::of(ask.query).reply(ask.base, ask.path, ask.query, repos)
                }
                _ => not_found(
                    ask.base,
                    &[format!("user redirect does not exist [name: {owner}]")],
                ),
            }
        }
        ["repos", owner, name, rest @ ..] => {
            let Some(repo) = db
                .repo(owner, name)
                .filter(|r| db.can_read(r, ask.viewer))
                .cloned()
            else {
                return not_found(ask.base, &[]);
            };
            if ask.method != Method::GET && ask.viewer.is_none() {
                return token_required(ask);
            }
            in_repo(db, ask, &repo, rest)
        }
        _ => not_found(ask.base, &[]),
    }
}

pub(super) fn render<'a>(db: &'a Instance, ask: &'a Ask<'_>) -> Render<'a> {
    Render {
        db,
        base: ask.base,
        viewer: ask.viewer,
    }
}

pub(super) fn token_required(ask: &Ask<'_>) -> Reply {
    api_error(ask.base, StatusCode::UNAUTHORIZED, "token is required")
}

pub(super) fn invalid(ask: &Ask<'_>, message: impl Into<String>) -> Reply {
    api_error(ask.base, StatusCode::UNPROCESSABLE_ENTITY, message)
}

/// The request body as a JSON object, or Gitea's binding error.
pub(super) fn body(ask: &Ask<'_>) -> Result<Map<String, Value>, Reply> {
    match serde_json::from_slice::<Value>(ask.body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(invalid(ask, "[]: Deserialization: expected a JSON object")),
        Err(e) => Err(invalid(ask, format!("[]: Deserialization: {e}"))),
    }
}

pub(super) fn text<'m>(m: &'m Map<String, Value>, k: &str) -> Option<&'m str> {
    m.get(k).and_then(Value::as_str)
}

/// A required, non-empty string field (`[Title]: Required` otherwise).
pub(super) fn required<'m>(
    ask: &Ask<'_>,
    m: &'m Map<String, Value>,
    k: &str,
) -> Result<&'m str, Reply> {
    match text(m, k) {
        Some(s) if !s.trim().is_empty() => Ok(s),
        _ => {
            let mut field = k.to_owned();
            if let Some(f) = field.get_mut(0..1) {
                f.make_ascii_uppercase();
            }
            Err(invalid(ask, format!("[{field}]: Required")))
        }
    }
}

pub(super) fn number(ask: &Ask<'_>, s: &str) -> Result<i64, Reply> {
    s.parse::<i64>().map_err(|_| not_found(ask.base, &[]))
}

fn in_repo(db: &mut Instance, ask: &Ask<'_>, repo: &Repo, rest: &[&str]) -> Reply {
    let m = ask.method;
    let result = match rest {
        [] if m == Method::GET => Ok(Reply::json(
            StatusCode::OK,
            render(db, ask).repository(repo),
        )),
        ["issues"] if m == Method::GET => Ok(list_issues(db, ask, repo)),
        ["issues"] if m == Method::POST => create_issue(db, ask, repo),
        ["issues", n] if m == Method::GET => number(ask, n).and_then(|n| {
            db.issue(repo.id, n)
                .map(|i| Reply::json(StatusCode::OK, render(db, ask).issue(repo, i)))
                .ok_or_else(|| not_found(ask.base, &[]))
        }),
        ["issues", n] if m == Method::PATCH => {
            number(ask, n).and_then(|n| edit_issue(db, ask, repo, n))
        }
        ["issues", n, "comments"] if m == Method::GET => number(ask, n).and_then(|n| {
            db.issue(repo.id, n)
                .ok_or_else(|| not_found(ask.base, &[]))?;
            let r = render(db, ask);
            let list = db
                .comments
                .iter()
                .filter(|c| c.repo_id == repo.id && c.issue_number == n)
                .map(|c| r.comment(repo, c))
                .collect();
            Ok(Reply::json(StatusCode::OK, Value::Array(list)))
        }),
        ["issues", n, "comments"] if m == Method::POST => number(ask, n).and_then(|n| {
            db.issue(repo.id, n)
                .ok_or_else(|| not_found(ask.base, &[]))?;
            let b = body(ask)?;
            let text = required(ask, &b, "body")?.to_owned();
            let who = ask.viewer.unwrap_or_default();
            let id = db.push_comment(repo.id, n, who, &text, now());
            touch(db, repo.id, n);
            let c = db
                .comments
                .iter()
                .find(|c| c.id == id)
                .ok_or_else(|| not_found(ask.base, &[]))?;
            Ok(Reply::json(
                StatusCode::CREATED,
                render(db, ask).comment(repo, c),
            ))
        }),
        ["issues", n, "labels"] if m == Method::PUT => {
            number(ask, n).and_then(|n| replace_labels(db, ask, repo, n))
        }
        ["labels"] if m == Method::GET => {
            let r = render(db, ask);
            let list = db
                .labels
                .iter()
                .filter(|l| l.repo_id == repo.id)
                .map(|l| r.label(l))
                .collect();
            Ok(Paging::of(ask.query).reply(ask.base, ask.path, ask.query, list))
        }
        ["milestones"] if m == Method::GET => {
            let state = ask.param("state").unwrap_or("open");
            let r = render(db, ask);
            let list = db
                .milestones
                .iter()
                .filter(|x| x.repo_id == repo.id && state_matches(state, x.open))
                .map(|x| r.milestone(x))
                .collect();
            Ok(Paging::of(ask.query).reply(ask.base, ask.path, ask.query, list))
        }
        ["branches"] if m == Method::GET => {
            let r = render(db, ask);
            let list = db
                .branches
                .iter()
                .filter(|((id, _), _)| *id == repo.id)
                .filter_map(|((_, name), c)| db.commits.get(c).map(|c| r.branch(repo, name, c)))
                .collect();
            Ok(Paging::of(ask.query).reply(ask.base, ask.path, ask.query, list))
        }
        ["branches"] if m == Method::POST => create_branch(db, ask, repo),
        ["pulls"] if m == Method::GET => Ok(list_pulls(db, ask, repo)),
        ["pulls"] if m == Method::POST => create_pull(db, ask, repo),
        ["pulls", n] if m == Method::GET => number(ask, n).and_then(|n| {
            db.issue(repo.id, n)
                .filter(|i| i.pull.is_some())
                .map(|i| Reply::json(StatusCode::OK, render(db, ask).pull(repo, i)))
                .ok_or_else(|| not_found(ask.base, &[]))
        }),
        ["pulls", n, "merge"] if m == Method::POST => {
            number(ask, n).and_then(|n| merge(db, ask, repo, n))
        }
        ["contents", path @ ..] if m == Method::GET => {
            Ok(read_contents(db, ask, repo, &path.join("/")))
        }
        ["contents", path @ ..] if !path.is_empty() && (m == Method::POST || m == Method::PUT) => {
            write_file(db, ask, repo, &path.join("/"))
        }
        ["releases"] if m == Method::GET => {
            let r = render(db, ask);
            let mut list: Vec<_> = db
                .releases
                .iter()
                .filter(|x| x.repo_id == repo.id)
                .collect();
            list.sort_by_key(|x| std::cmp::Reverse(x.created));
            let list = list.into_iter().map(|x| r.release(repo, x)).collect();
            Ok(Paging::of(ask.query).reply(ask.base, ask.path, ask.query, list))
        }
        ["releases"] if m == Method::POST => create_release(db, ask, repo),
        _ => Err(not_found(ask.base, &[])),
    };
    result.unwrap_or_else(|r| r)
}

fn state_matches(wanted: &str, open: bool) -> bool {
    match wanted {
        "closed" => !open,
        "all" => true,
        _ => open,
    }
}

pub(super) fn touch(db: &mut Instance, repo_id: i64, number: i64) {
    if let Some(i) = db
        .issues
        .iter_mut()
        .find(|i| i.repo_id == repo_id && i.number == number)
    {
        i.updated = now();
    }
}

fn list_issues(db: &Instance, ask: &Ask<'_>, repo: &Repo) -> Reply {
    let state = ask.param("state").unwrap_or("open");
    let kind = ask.param("type").unwrap_or("");
    let labels: Vec<&str> = ask
        .param("labels")
        .map(|l| {
            l.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let q = ask.param("q").map(str::to_lowercase);
    let mut list: Vec<_> = db
        .issues
        .iter()
        .filter(|i| i.repo_id == repo.id && state_matches(state, i.open))
        .filter(|i| match kind {
            "issues" => i.pull.is_none(),
            "pulls" => i.pull.is_some(),
            _ => true,
        })
        .filter(|i| {
            labels.iter().all(|name| {
                db.labels
                    .iter()
                    .any(|l| l.repo_id == repo.id && l.name == *name && i.labels.contains(&l.id))
            })
        })
        .filter(|i| ask.param("created_by").is_none_or(|u| i.poster == u))
        .filter(|i| {
            ask.param("assigned_by")
                .is_none_or(|u| i.assignees.iter().any(|a| a == u))
        })
        .filter(|i| {
            q.as_deref().is_none_or(|q| {
                i.title.to_lowercase().contains(q) || i.body.to_lowercase().contains(q)
            })
        })
        .collect();
    list.sort_by_key(|i| std::cmp::Reverse(i.created));
    let r = render(db, ask);
    let list = list.into_iter().map(|i| r.issue(repo, i)).collect();
    Paging::of(ask.query).reply(ask.base, ask.path, ask.query, list)
}

fn list_pulls(db: &Instance, ask: &Ask<'_>, repo: &Repo) -> Reply {
    let state = ask.param("state").unwrap_or("open");
    let mut list: Vec<_> = db
        .issues
        .iter()
        .filter(|i| i.repo_id == repo.id && i.pull.is_some() && state_matches(state, i.open))
        .filter(|i| {
            ask.param("base_branch")
                .is_none_or(|b| i.pull.as_ref().is_some_and(|p| p.base == b))
        })
        .collect();
    match ask.param("sort") {
        Some("oldest") => list.sort_by_key(|i| i.created),
        Some("leastupdate") => list.sort_by_key(|i| i.updated),
        Some("recentupdate" | "mostupdate") => list.sort_by_key(|i| std::cmp::Reverse(i.updated)),
        _ => list.sort_by_key(|i| std::cmp::Reverse(i.created)),
    }
    let r = render(db, ask);
    let list = list.into_iter().map(|i| r.pull(repo, i)).collect();
    Paging::of(ask.query).reply(ask.base, ask.path, ask.query, list)
}

fn read_contents(db: &Instance, ask: &Ask<'_>, repo: &Repo, path: &str) -> Reply {
    let reference = ask
        .param("ref")
        .filter(|r| !r.is_empty())
        .unwrap_or(&repo.default_branch);
    let Some(commit) = db.resolve(repo, reference) else {
        return not_found(
            ask.base,
            &[format!(
                "object does not exist [id: {reference}, rel_path: ]"
            )],
        );
    };
    let r = render(db, ask);
    if commit.tree.contains_key(path) {
        return Reply::json(
            StatusCode::OK,
            r.contents(repo, reference, commit, path, true),
        );
    }
    // A directory: its direct entries, files and sub-directories, each without content.
    let prefix = if path.is_empty() {
        String::new()
    } else {
        format!("{path}/")
    };
    let mut entries: Vec<String> = commit
        .tree
        .keys()
        .filter_map(|p| p.strip_prefix(&prefix))
        .map(|rest| match rest.split_once('/') {
            Some((dir, _)) => format!("{prefix}{dir}"),
            None => format!("{prefix}{rest}"),
        })
        .collect();
    entries.dedup();
    if entries.is_empty() {
        return not_found(
            ask.base,
            &[format!("object does not exist [id: , rel_path: {path}]")],
        );
    }
    let list = entries
        .iter()
        .map(|p| r.contents(repo, reference, commit, p, false))
        .collect();
    Reply::json(StatusCode::OK, Value::Array(list))
}
