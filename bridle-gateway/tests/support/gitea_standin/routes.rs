//! The stand-in's routes: `/api/v1` paths to answers, with Gitea's order of checks (the
//! repository must be visible before anything else is looked at, a write needs a signed-in
//! user, request bodies are validated before they are applied) and its status codes (201 for
//! created objects and for an edited issue, 200 with an empty body for a merge, 404 for what one
//! may not see, 409 for duplicates, 422 for invalid input).

use axum::http::{Method, StatusCode};
use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::model::{Instance, Render, Repo, now};
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

fn render<'a>(db: &'a Instance, ask: &'a Ask<'_>) -> Render<'a> {
    Render {
        db,
        base: ask.base,
        viewer: ask.viewer,
    }
}

fn token_required(ask: &Ask<'_>) -> Reply {
    api_error(ask.base, StatusCode::UNAUTHORIZED, "token is required")
}

fn invalid(ask: &Ask<'_>, message: impl Into<String>) -> Reply {
    api_error(ask.base, StatusCode::UNPROCESSABLE_ENTITY, message)
}

/// The request body as a JSON object, or Gitea's binding error.
fn body(ask: &Ask<'_>) -> Result<Map<String, Value>, Reply> {
    match serde_json::from_slice::<Value>(ask.body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(invalid(ask, "[]: Deserialization: expected a JSON object")),
        Err(e) => Err(invalid(ask, format!("[]: Deserialization: {e}"))),
    }
}

fn text<'m>(m: &'m Map<String, Value>, k: &str) -> Option<&'m str> {
    m.get(k).and_then(Value::as_str)
}

/// A required, non-empty string field (`[Title]: Required` otherwise).
fn required<'m>(ask: &Ask<'_>, m: &'m Map<String, Value>, k: &str) -> Result<&'m str, Reply> {
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

fn number(ask: &Ask<'_>, s: &str) -> Result<i64, Reply> {
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

fn touch(db: &mut Instance, repo_id: i64, number: i64) {
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

/// Label ids from a JSON array of ids or names (Gitea accepts both).
fn label_ids(
    db: &Instance,
    ask: &Ask<'_>,
    repo: &Repo,
    v: Option<&Value>,
) -> Result<Vec<i64>, Reply> {
    let mut out = Vec::new();
    for item in v
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let found = db.labels.iter().find(|l| {
            l.repo_id == repo.id
                && (item.as_i64() == Some(l.id) || item.as_str() == Some(l.name.as_str()))
        });
        match found {
            Some(l) => out.push(l.id),
            None => return Err(invalid(ask, format!("label does not exist [id: {item}]"))),
        }
    }
    Ok(out)
}

fn logins(db: &Instance, ask: &Ask<'_>, v: Option<&Value>) -> Result<Vec<String>, Reply> {
    let mut out = Vec::new();
    for item in v
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let name = item.as_str().unwrap_or_default();
        match db.account(name).filter(|a| !a.is_org) {
            Some(a) => out.push(a.login.clone()),
            None => {
                return Err(invalid(
                    ask,
                    format!("user does not exist [uid: 0, name: {name}]"),
                ));
            }
        }
    }
    Ok(out)
}

fn milestone_id(
    db: &Instance,
    ask: &Ask<'_>,
    repo: &Repo,
    v: Option<&Value>,
) -> Result<Option<i64>, Reply> {
    match v.and_then(Value::as_i64) {
        None | Some(0) => Ok(None),
        Some(id)
            if db
                .milestones
                .iter()
                .any(|m| m.id == id && m.repo_id == repo.id) =>
        {
            Ok(Some(id))
        }
        Some(id) => Err(not_found(
            ask.base,
            &[format!(
                "milestone does not exist [id: {id}, repo_id: {}]",
                repo.id
            )],
        )),
    }
}

fn create_issue(db: &mut Instance, ask: &Ask<'_>, repo: &Repo) -> Result<Reply, Reply> {
    let b = body(ask)?;
    let title = required(ask, &b, "title")?.to_owned();
    let labels = label_ids(db, ask, repo, b.get("labels"))?;
    let assignees = logins(db, ask, b.get("assignees"))?;
    let milestone = milestone_id(db, ask, repo, b.get("milestone"))?;
    let who = ask.viewer.unwrap_or_default();
    let body_text = text(&b, "body").unwrap_or_default().to_owned();
    let id = db.push_issue(
        repo.id,
        who,
        &title,
        &body_text,
        labels,
        milestone,
        None,
        now(),
    );
    let closed = b.get("closed").and_then(Value::as_bool).unwrap_or(false);
    let issue = db
        .issues
        .iter_mut()
        .find(|i| i.id == id)
        .ok_or_else(|| not_found(ask.base, &[]))?;
    issue.assignees = assignees;
    if closed {
        issue.open = false;
        issue.closed = Some(issue.created);
    }
    let issue = issue.clone();
    Ok(Reply::json(
        StatusCode::CREATED,
        render(db, ask).issue(repo, &issue),
    ))
}

fn edit_issue(db: &mut Instance, ask: &Ask<'_>, repo: &Repo, n: i64) -> Result<Reply, Reply> {
    db.issue(repo.id, n)
        .ok_or_else(|| not_found(ask.base, &[]))?;
    let b = body(ask)?;
    let assignees = match b.get("assignees") {
        Some(v) => Some(logins(db, ask, Some(v))?),
        None => None,
    };
    let milestone = match b.get("milestone") {
        Some(v) => Some(milestone_id(db, ask, repo, Some(v))?),
        None => None,
    };
    let state = match text(&b, "state") {
        None => None,
        Some("open") => Some(true),
        Some("closed") => Some(false),
        Some(other) => return Err(invalid(ask, format!("[State]: invalid state {other:?}"))),
    };
    if b.get("title").is_some() {
        required(ask, &b, "title")?;
    }
    let issue = db
        .issues
        .iter_mut()
        .find(|i| i.repo_id == repo.id && i.number == n)
        .ok_or_else(|| not_found(ask.base, &[]))?;
    if let Some(t) = text(&b, "title") {
        issue.title = t.to_owned();
    }
    if let Some(t) = text(&b, "body") {
        issue.body = t.to_owned();
    }
    if let Some(a) = assignees {
        issue.assignees = a;
    }
    if let Some(m) = milestone {
        issue.milestone = m;
    }
    if let Some(open) = state {
        if issue.open != open {
            issue.closed = (!open).then(now);
        }
        issue.open = open;
    }
    issue.updated = now();
    let issue = issue.clone();
    Ok(Reply::json(
        StatusCode::CREATED,
        render(db, ask).issue(repo, &issue),
    ))
}

fn replace_labels(db: &mut Instance, ask: &Ask<'_>, repo: &Repo, n: i64) -> Result<Reply, Reply> {
    db.issue(repo.id, n)
        .ok_or_else(|| not_found(ask.base, &[]))?;
    let b = body(ask)?;
    let ids = label_ids(db, ask, repo, b.get("labels"))?;
    if let Some(i) = db
        .issues
        .iter_mut()
        .find(|i| i.repo_id == repo.id && i.number == n)
    {
        i.labels = ids.clone();
        i.updated = now();
    }
    let r = render(db, ask);
    let list = ids
        .iter()
        .filter_map(|id| db.labels.iter().find(|l| l.id == *id))
        .map(|l| r.label(l))
        .collect();
    Ok(Reply::json(StatusCode::OK, Value::Array(list)))
}

fn create_branch(db: &mut Instance, ask: &Ask<'_>, repo: &Repo) -> Result<Reply, Reply> {
    let b = body(ask)?;
    let name = required(ask, &b, "new_branch_name")?.to_owned();
    let from = text(&b, "old_ref_name")
        .or_else(|| text(&b, "old_branch_name"))
        .filter(|s| !s.is_empty())
        .unwrap_or(&repo.default_branch);
    let Some(commit) = db.resolve(repo, from).map(|c| c.id.clone()) else {
        return Err(api_error(
            ask.base,
            StatusCode::NOT_FOUND,
            "The old branch does not exist",
        ));
    };
    if db.branches.contains_key(&(repo.id, name.clone())) {
        return Err(api_error(
            ask.base,
            StatusCode::CONFLICT,
            "The branch already exists.",
        ));
    }
    db.branches.insert((repo.id, name.clone()), commit.clone());
    let c = db
        .commits
        .get(&commit)
        .ok_or_else(|| not_found(ask.base, &[]))?;
    Ok(Reply::json(
        StatusCode::CREATED,
        render(db, ask).branch(repo, &name, c),
    ))
}

fn create_pull(db: &mut Instance, ask: &Ask<'_>, repo: &Repo) -> Result<Reply, Reply> {
    let b = body(ask)?;
    let head = required(ask, &b, "head")?.to_owned();
    let base = required(ask, &b, "base")?.to_owned();
    let title = required(ask, &b, "title")?.to_owned();
    let (Some(head_sha), Some(base_sha)) = (
        db.branches.get(&(repo.id, head.clone())).cloned(),
        db.branches.get(&(repo.id, base.clone())).cloned(),
    ) else {
        return Err(not_found(ask.base, &[]));
    };
    if let Some(open) = db.issues.iter().find(|i| {
        i.repo_id == repo.id
            && i.open
            && i.pull
                .as_ref()
                .is_some_and(|p| p.head == head && p.base == base)
    }) {
        let pid = open.pull.as_ref().map(|p| p.id).unwrap_or_default();
        return Err(api_error(
            ask.base,
            StatusCode::CONFLICT,
            format!(
                "pull request already exists for these targets [id: {pid}, issue_id: {}, head_repo_id: {}, base_repo_id: {}, head_branch: {head}, base_branch: {base}]",
                open.id, repo.id, repo.id
            ),
        ));
    }
    if head_sha == base_sha {
        return Err(invalid(
            ask,
            "Invalid PullRequest: There are no changes between the head and the base",
        ));
    }
    let labels = label_ids(db, ask, repo, b.get("labels"))?;
    let milestone = milestone_id(db, ask, repo, b.get("milestone"))?;
    let who = ask.viewer.unwrap_or_default();
    let body_text = text(&b, "body").unwrap_or_default().to_owned();
    let id = db.push_issue(
        repo.id,
        who,
        &title,
        &body_text,
        labels,
        milestone,
        Some((&head, &base)),
        now(),
    );
    let draft = b.get("draft").and_then(Value::as_bool).unwrap_or(false);
    let issue = db
        .issues
        .iter_mut()
        .find(|i| i.id == id)
        .ok_or_else(|| not_found(ask.base, &[]))?;
    if let Some(p) = issue.pull.as_mut() {
        p.draft = draft;
    }
    let issue = issue.clone();
    Ok(Reply::json(
        StatusCode::CREATED,
        render(db, ask).pull(repo, &issue),
    ))
}

fn merge(db: &mut Instance, ask: &Ask<'_>, repo: &Repo, n: i64) -> Result<Reply, Reply> {
    let issue = db
        .issue(repo.id, n)
        .filter(|i| i.pull.is_some())
        .cloned()
        .ok_or_else(|| not_found(ask.base, &[]))?;
    let b = body(ask)?;
    let how = required(ask, &b, "Do")?.to_owned();
    if ![
        "merge",
        "rebase",
        "rebase-merge",
        "squash",
        "fast-forward-only",
        "manually-merged",
    ]
    .contains(&how.as_str())
    {
        return Err(invalid(ask, "[Do]: Invalid"));
    }
    let Some(pull) = issue.pull else {
        return Err(not_found(ask.base, &[]));
    };
    if pull.merged_at.is_some() {
        return Err(Reply::empty(StatusCode::METHOD_NOT_ALLOWED));
    }
    let head = db
        .branches
        .get(&(repo.id, pull.head.clone()))
        .cloned()
        .unwrap_or_default();
    let base = db
        .branches
        .get(&(repo.id, pull.base.clone()))
        .cloned()
        .unwrap_or_default();
    let files: Vec<(String, String)> = db
        .commits
        .get(&head)
        .map(|c| {
            c.tree
                .iter()
                .map(|(p, b)| (p.clone(), String::from_utf8_lossy(b).into_owned()))
                .collect()
        })
        .unwrap_or_default();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_str()))
        .collect();
    let who = ask.viewer.unwrap_or_default();
    let message = text(&b, "MergeTitleField")
        .map(str::to_owned)
        .unwrap_or_else(|| {
            format!(
                "Merge pull request '{}' (#{n}) from {} into {}",
                issue.title, pull.head, pull.base
            )
        });
    let merged = db.commit(Some(&base), who, &message, now(), &refs);
    db.branches
        .insert((repo.id, pull.base.clone()), merged.clone());
    if let Some(i) = db.issues.iter_mut().find(|i| i.id == issue.id) {
        let at = now();
        i.open = false;
        i.closed = Some(at);
        i.updated = at;
        if let Some(p) = i.pull.as_mut() {
            p.merged_at = Some(at);
            p.merged_by = Some(who.to_owned());
            p.merge_commit = Some(merged);
        }
    }
    Ok(Reply::empty(StatusCode::OK))
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

fn write_file(db: &mut Instance, ask: &Ask<'_>, repo: &Repo, path: &str) -> Result<Reply, Reply> {
    let creating = ask.method == Method::POST;
    let b = body(ask)?;
    let encoded = required(ask, &b, "content")?;
    let content = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| invalid(ask, format!("illegal base64 data: {e}")))?;
    let content = String::from_utf8(content)
        .map_err(|_| invalid(ask, "the stand-in keeps text files only"))?;
    let branch = text(&b, "branch")
        .filter(|s| !s.is_empty())
        .unwrap_or(&repo.default_branch)
        .to_owned();
    let Some(parent) = db.branches.get(&(repo.id, branch.clone())).cloned() else {
        return Err(not_found(
            ask.base,
            &[format!("branch does not exist [name: {branch}]")],
        ));
    };
    let target = text(&b, "new_branch")
        .filter(|s| !s.is_empty())
        .unwrap_or(&branch)
        .to_owned();
    if target != branch && db.branches.contains_key(&(repo.id, target.clone())) {
        return Err(invalid(
            ask,
            format!("branch already exists [name: {target}]"),
        ));
    }
    let existing = db
        .commits
        .get(&parent)
        .and_then(|c| c.tree.get(path))
        .map(|b| super::model::git_id("blob", b));
    match (creating, &existing) {
        (true, Some(_)) => {
            return Err(invalid(
                ask,
                format!("repository file already exists [path: {path}]"),
            ));
        }
        (false, None) => {
            return Err(not_found(
                ask.base,
                &[format!("repository file does not exist [path: {path}]")],
            ));
        }
        (false, Some(sha)) => {
            let given = required(ask, &b, "sha")?;
            if given != sha {
                return Err(invalid(
                    ask,
                    format!("sha does not match [given: {given}, expected: {sha}]"),
                ));
            }
        }
        (true, None) => {}
    }
    let message = text(&b, "message")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{} {path}", if creating { "Add" } else { "Update" }));
    let who = ask.viewer.unwrap_or_default();
    let id = db.commit(Some(&parent), who, &message, now(), &[(path, &content)]);
    db.branches.insert((repo.id, target.clone()), id.clone());
    let commit = db
        .commits
        .get(&id)
        .ok_or_else(|| not_found(ask.base, &[]))?;
    let status = if creating {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(Reply::json(
        status,
        render(db, ask).file_response(repo, &target, commit, path),
    ))
}

fn create_release(db: &mut Instance, ask: &Ask<'_>, repo: &Repo) -> Result<Reply, Reply> {
    let b = body(ask)?;
    let tag = required(ask, &b, "tag_name")?.to_owned();
    if db
        .releases
        .iter()
        .any(|r| r.repo_id == repo.id && r.tag == tag)
    {
        return Err(api_error(
            ask.base,
            StatusCode::CONFLICT,
            "Release is has no Tag",
        ));
    }
    let target = text(&b, "target_commitish")
        .filter(|s| !s.is_empty())
        .unwrap_or(&repo.default_branch)
        .to_owned();
    if db.resolve(repo, &target).is_none() {
        return Err(not_found(
            ask.base,
            &[format!("object does not exist [id: {target}, rel_path: ]")],
        ));
    }
    let id = db.id();
    let flag = |k: &str| b.get(k).and_then(Value::as_bool).unwrap_or(false);
    let release = super::model::Release {
        id,
        repo_id: repo.id,
        name: text(&b, "name").unwrap_or(&tag).to_owned(),
        body: text(&b, "body").unwrap_or_default().to_owned(),
        draft: flag("draft"),
        prerelease: flag("prerelease"),
        author: ask.viewer.unwrap_or_default().to_owned(),
        created: now(),
        tag,
        target,
    };
    db.releases.push(release.clone());
    Ok(Reply::json(
        StatusCode::CREATED,
        render(db, ask).release(repo, &release),
    ))
}
