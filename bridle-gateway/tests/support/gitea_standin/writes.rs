//! The stand-in's writes, validated before they are applied, with Gitea's status codes: 201 for
//! created objects and for an edited issue, 200 with an empty body for a merge, 404 for what is
//! not there, 409 for duplicates, 422 for invalid input.

use axum::http::{Method, StatusCode};
use base64::Engine as _;
use serde_json::Value;

use super::model::{Instance, Release, Repo, git_id, now};
use super::routes::{body, invalid, render, required, text};
use super::{Ask, Reply, api_error, not_found};

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

pub(super) fn create_issue(db: &mut Instance, ask: &Ask<'_>, repo: &Repo) -> Result<Reply, Reply> {
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

pub(super) fn edit_issue(
    db: &mut Instance,
    ask: &Ask<'_>,
    repo: &Repo,
    n: i64,
) -> Result<Reply, Reply> {
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

pub(super) fn replace_labels(
    db: &mut Instance,
    ask: &Ask<'_>,
    repo: &Repo,
    n: i64,
) -> Result<Reply, Reply> {
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

pub(super) fn create_branch(db: &mut Instance, ask: &Ask<'_>, repo: &Repo) -> Result<Reply, Reply> {
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

pub(super) fn create_pull(db: &mut Instance, ask: &Ask<'_>, repo: &Repo) -> Result<Reply, Reply> {
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

pub(super) fn merge(db: &mut Instance, ask: &Ask<'_>, repo: &Repo, n: i64) -> Result<Reply, Reply> {
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

pub(super) fn write_file(
    db: &mut Instance,
    ask: &Ask<'_>,
    repo: &Repo,
    path: &str,
) -> Result<Reply, Reply> {
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
        .map(|b| git_id("blob", b));
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

pub(super) fn create_release(
    db: &mut Instance,
    ask: &Ask<'_>,
    repo: &Repo,
) -> Result<Reply, Reply> {
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
    let release = Release {
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
