//! The JSON shapes Gitea's `/api/v1` answers with (`User`, `Repository`, `Issue`, `Comment`,
//! `PullRequest`, `Branch`, `ContentsResponse`, `FileResponse`, `Label`, `Milestone`, `Release`),
//! field for field from Gitea 1.25's swagger definitions, rendered from the stand-in's data.

use base64::Engine as _;
use serde_json::{Value, json};

use super::model::{
    Comment, Commit, Instance, Issue, Label, Milestone, Release, Repo, SEEDED_AT, capitalized,
    git_id, time,
};

/// Renders the instance's objects as Gitea's API does; `base` is the instance's root URL
/// (`http://127.0.0.1:PORT`, no trailing slash).
pub struct Render<'a> {
    pub db: &'a Instance,
    pub base: &'a str,
    /// The signed-in login, for `permissions` and `user_can_push`.
    pub viewer: Option<&'a str>,
}

impl Render<'_> {
    pub fn user(&self, login: &str) -> Value {
        let Some(a) = self.db.account(login) else {
            return Value::Null;
        };
        json!({
            "id": a.id,
            "login": a.login,
            "login_name": "",
            "source_id": 0,
            "full_name": a.full_name,
            "email": format!("{}@example.invalid", a.login),
            "avatar_url": format!("{}/avatars/{}", self.base, a.id),
            "html_url": format!("{}/{}", self.base, a.login),
            "language": "en-US",
            "is_admin": false,
            "last_login": time(SEEDED_AT),
            "created": time(SEEDED_AT - 86_400),
            "restricted": false,
            "active": true,
            "prohibit_login": false,
            "location": "",
            "website": "",
            "description": "",
            "visibility": if a.is_org { "private" } else { "public" },
            "followers_count": 0,
            "following_count": 0,
            "starred_repos_count": 0,
        })
    }

    pub fn repository(&self, r: &Repo) -> Value {
        let full = format!("{}/{}", r.owner, r.name);
        let html = format!("{}/{full}", self.base);
        let issues = |pulls: bool| {
            self.db
                .issues
                .iter()
                .filter(|i| i.repo_id == r.id && i.open && i.pull.is_some() == pulls)
                .count()
        };
        let writer = self.viewer.is_some_and(|v| self.db.can_write(r, v));
        let identity = json!({
            "id": r.id,
            "owner": self.user(&r.owner),
            "name": r.name,
            "full_name": full,
            "description": r.description,
            "empty": false,
            "private": r.private,
            "fork": false,
            "template": false,
            "parent": null,
            "mirror": false,
            "size": 24,
            "language": "Rust",
            "languages_url": format!("{}/api/v1/repos/{full}/languages", self.base),
            "html_url": html,
            "url": format!("{}/api/v1/repos/{full}", self.base),
            "link": "",
            "ssh_url": format!("ssh://git@127.0.0.1/{full}.git"),
            "clone_url": format!("{html}.git"),
            "original_url": "",
            "website": "",
            "stars_count": 0,
            "forks_count": 0,
            "watchers_count": 1,
            "open_issues_count": issues(false),
            "open_pr_counter": issues(true),
            "release_counter": self.db.releases.iter().filter(|x| x.repo_id == r.id).count(),
            "default_branch": r.default_branch,
            "archived": false,
            "created_at": time(SEEDED_AT - 3_600),
            "updated_at": time(SEEDED_AT),
            "archived_at": time(0),
        });
        // Two literals: one would pass `json!`'s recursion limit.
        let settings = json!({
            "permissions": {"admin": writer, "push": writer, "pull": true},
            "has_code": true,
            "has_issues": true,
            "internal_tracker": {
                "enable_time_tracker": true,
                "allow_only_contributors_to_track_time": true,
                "enable_issue_dependencies": true,
            },
            "has_wiki": false,
            "has_pull_requests": true,
            "has_projects": false,
            "projects_mode": "all",
            "has_releases": true,
            "has_packages": false,
            "has_actions": false,
            "ignore_whitespace_conflicts": false,
            "allow_merge_commits": true,
            "allow_rebase": true,
            "allow_rebase_explicit": true,
            "allow_squash_merge": true,
            "allow_fast_forward_only_merge": true,
            "allow_rebase_update": true,
            "allow_manual_merge": false,
            "autodetect_manual_merge": false,
            "default_delete_branch_after_merge": false,
            "default_merge_style": "merge",
            "default_allow_maintainer_edit": false,
            "avatar_url": "",
            "internal": false,
            "mirror_interval": "",
            "object_format_name": "sha256",
            "mirror_updated": time(0),
            "repo_transfer": null,
            "topics": [],
            "licenses": [],
        });
        if let (Value::Object(mut all), Value::Object(more)) = (identity, settings) {
            all.extend(more);
            return Value::Object(all);
        }
        Value::Null
    }

    pub fn label(&self, l: &Label) -> Value {
        let repo = self.db.repos.iter().find(|r| r.id == l.repo_id);
        json!({
            "id": l.id,
            "name": l.name,
            "exclusive": false,
            "is_archived": false,
            "color": l.color,
            "description": l.description,
            "url": repo.map(|r| format!("{}/api/v1/repos/{}/{}/labels/{}", self.base, r.owner, r.name, l.id)),
        })
    }

    pub fn milestone(&self, m: &Milestone) -> Value {
        let count = |open: bool| {
            self.db
                .issues
                .iter()
                .filter(|i| i.milestone == Some(m.id) && i.open == open)
                .count()
        };
        json!({
            "id": m.id,
            "title": m.title,
            "description": m.description,
            "state": if m.open { "open" } else { "closed" },
            "open_issues": count(true),
            "closed_issues": count(false),
            "created_at": time(SEEDED_AT),
            "updated_at": time(SEEDED_AT),
            "closed_at": null,
            "due_on": null,
        })
    }

    fn labels_of(&self, i: &Issue) -> Vec<Value> {
        i.labels
            .iter()
            .filter_map(|id| self.db.labels.iter().find(|l| l.id == *id))
            .map(|l| self.label(l))
            .collect()
    }

    fn milestone_of(&self, i: &Issue) -> Value {
        i.milestone
            .and_then(|id| self.db.milestones.iter().find(|m| m.id == id))
            .map(|m| self.milestone(m))
            .unwrap_or(Value::Null)
    }

    fn assignees_of(&self, i: &Issue) -> (Value, Value) {
        if i.assignees.is_empty() {
            return (Value::Null, Value::Null);
        }
        let all: Vec<Value> = i.assignees.iter().map(|a| self.user(a)).collect();
        (all[0].clone(), Value::Array(all))
    }

    fn comment_count(&self, i: &Issue) -> usize {
        self.db
            .comments
            .iter()
            .filter(|c| c.repo_id == i.repo_id && c.issue_number == i.number)
            .count()
    }

    pub fn issue(&self, r: &Repo, i: &Issue) -> Value {
        let full = format!("{}/{}", r.owner, r.name);
        let kind = if i.pull.is_some() { "pulls" } else { "issues" };
        let html = format!("{}/{full}/{kind}/{}", self.base, i.number);
        let (assignee, assignees) = self.assignees_of(i);
        json!({
            "id": i.id,
            "url": format!("{}/api/v1/repos/{full}/issues/{}", self.base, i.number),
            "html_url": html,
            "number": i.number,
            "user": self.user(&i.poster),
            "original_author": "",
            "original_author_id": 0,
            "title": i.title,
            "body": i.body,
            "ref": "",
            "assets": [],
            "labels": self.labels_of(i),
            "milestone": self.milestone_of(i),
            "assignee": assignee,
            "assignees": assignees,
            "state": if i.open { "open" } else { "closed" },
            "is_locked": false,
            "comments": self.comment_count(i),
            "created_at": time(i.created),
            "updated_at": time(i.updated),
            "closed_at": i.closed.map(time),
            "due_date": null,
            "time_estimate": 0,
            "pull_request": i.pull.as_ref().map(|p| json!({
                "merged": p.merged_at.is_some(),
                "merged_at": p.merged_at.map(time),
                "draft": p.draft,
                "html_url": html,
            })),
            "repository": {"id": r.id, "name": r.name, "owner": r.owner, "full_name": full},
            "pin_order": 0,
        })
    }

    pub fn comment(&self, r: &Repo, c: &Comment) -> Value {
        let full = format!("{}/{}", r.owner, r.name);
        let is_pull = self
            .db
            .issue(r.id, c.issue_number)
            .is_some_and(|i| i.pull.is_some());
        let page = format!("{}/{full}/issues/{}", self.base, c.issue_number);
        json!({
            "id": c.id,
            "html_url": format!("{page}#issuecomment-{}", c.id),
            "pull_request_url": if is_pull { format!("{}/{full}/pulls/{}", self.base, c.issue_number) } else { String::new() },
            "issue_url": if is_pull { String::new() } else { page },
            "user": self.user(&c.poster),
            "original_author": "",
            "original_author_id": 0,
            "body": c.body,
            "assets": [],
            "created_at": time(c.created),
            "updated_at": time(c.created),
        })
    }

    fn branch_info(&self, r: &Repo, branch: &str) -> Value {
        let sha = self
            .db
            .branches
            .get(&(r.id, branch.to_owned()))
            .cloned()
            .unwrap_or_default();
        json!({
            "label": branch,
            "ref": branch,
            "sha": sha,
            "repo_id": r.id,
            "repo": self.repository(r),
        })
    }

    pub fn pull(&self, r: &Repo, i: &Issue) -> Value {
        let Some(p) = &i.pull else {
            return Value::Null;
        };
        let full = format!("{}/{}", r.owner, r.name);
        let html = format!("{}/{full}/pulls/{}", self.base, i.number);
        let (assignee, assignees) = self.assignees_of(i);
        let base_sha = self.db.branches.get(&(r.id, p.base.clone()));
        json!({
            "id": p.id,
            "url": html,
            "number": i.number,
            "user": self.user(&i.poster),
            "title": i.title,
            "body": i.body,
            "labels": self.labels_of(i),
            "milestone": self.milestone_of(i),
            "assignee": assignee,
            "assignees": assignees,
            "requested_reviewers": [],
            "requested_reviewers_teams": [],
            "state": if i.open { "open" } else { "closed" },
            "draft": p.draft,
            "is_locked": false,
            "comments": self.comment_count(i),
            "review_comments": 0,
            "additions": 1,
            "deletions": 0,
            "changed_files": 1,
            "html_url": html,
            "diff_url": format!("{html}.diff"),
            "patch_url": format!("{html}.patch"),
            "mergeable": i.open,
            "merged": p.merged_at.is_some(),
            "merged_at": p.merged_at.map(time),
            "merge_commit_sha": p.merge_commit,
            "merged_by": p.merged_by.as_deref().map(|m| self.user(m)).unwrap_or(Value::Null),
            "allow_maintainer_edit": false,
            "base": self.branch_info(r, &p.base),
            "head": self.branch_info(r, &p.head),
            "merge_base": base_sha,
            "due_date": null,
            "created_at": time(i.created),
            "updated_at": time(i.updated),
            "closed_at": i.closed.map(time),
            "pin_order": 0,
        })
    }

    fn signature(&self, login: &str, at: i64) -> Value {
        json!({"name": capitalized(login), "email": format!("{login}@example.invalid"), "username": login, "date": time(at)})
    }

    pub fn branch(&self, r: &Repo, name: &str, commit: &Commit) -> Value {
        let who = self.signature(&commit.author, commit.time);
        let writer = self.viewer.is_some_and(|v| self.db.can_write(r, v));
        json!({
            "name": name,
            "commit": {
                "id": commit.id,
                "message": format!("{}\n", commit.message),
                "url": format!("{}/{}/{}/commit/{}", self.base, r.owner, r.name, commit.id),
                "author": who,
                "committer": who,
                "verification": {
                    "verified": false,
                    "reason": "gpg.error.not_signed_commit",
                    "signature": "",
                    "signer": null,
                    "payload": "",
                },
                "timestamp": time(commit.time),
                "added": null,
                "removed": null,
                "modified": null,
            },
            "protected": false,
            "required_approvals": 0,
            "enable_status_check": false,
            "status_check_contexts": [],
            "user_can_push": writer,
            "user_can_merge": writer,
            "effective_branch_protection_name": "",
        })
    }

    /// `ContentsResponse` of one entry: a file (with content) or a directory (without).
    pub fn contents(
        &self,
        r: &Repo,
        reference: &str,
        commit: &Commit,
        path: &str,
        with_content: bool,
    ) -> Value {
        let full = format!("{}/{}", r.owner, r.name);
        let name = path.rsplit('/').next().unwrap_or(path);
        let self_url = format!(
            "{}/api/v1/repos/{full}/contents/{path}?ref={}",
            self.base,
            super::encode(reference)
        );
        match commit.tree.get(path) {
            Some(body) => {
                let sha = git_id("blob", body);
                let git = format!("{}/api/v1/repos/{full}/git/blobs/{sha}", self.base);
                let html = format!("{}/{full}/src/branch/{reference}/{path}", self.base);
                json!({
                    "name": name,
                    "path": path,
                    "sha": sha,
                    "last_commit_sha": commit.id,
                    "last_commit_message": format!("{}\n", commit.message),
                    "type": "file",
                    "size": body.len(),
                    "encoding": if with_content { Value::from("base64") } else { Value::Null },
                    "content": if with_content {
                        Value::from(base64::engine::general_purpose::STANDARD.encode(body))
                    } else {
                        Value::Null
                    },
                    "target": null,
                    "url": self_url,
                    "html_url": html,
                    "git_url": git,
                    "download_url": format!("{}/{full}/raw/branch/{reference}/{path}", self.base),
                    "submodule_git_url": null,
                    "_links": {"self": self_url, "git": git, "html": html},
                })
            }
            None => {
                let html = format!("{}/{full}/src/branch/{reference}/{path}", self.base);
                json!({
                    "name": name,
                    "path": path,
                    "sha": git_id("tree", path.as_bytes()),
                    "last_commit_sha": commit.id,
                    "last_commit_message": format!("{}\n", commit.message),
                    "type": "dir",
                    "size": 0,
                    "encoding": null,
                    "content": null,
                    "target": null,
                    "url": self_url,
                    "html_url": html,
                    "git_url": null,
                    "download_url": null,
                    "submodule_git_url": null,
                    "_links": {"self": self_url, "git": null, "html": html},
                })
            }
        }
    }

    /// `FileResponse` after a file was written by `commit`.
    pub fn file_response(&self, r: &Repo, branch: &str, commit: &Commit, path: &str) -> Value {
        let full = format!("{}/{}", r.owner, r.name);
        let who = self.signature(&commit.author, commit.time);
        json!({
            "content": self.contents(r, branch, commit, path, false),
            "commit": {
                "url": format!("{}/api/v1/repos/{full}/git/commits/{}", self.base, commit.id),
                "sha": commit.id,
                "created": time(commit.time),
                "html_url": format!("{}/{full}/commit/{}", self.base, commit.id),
                "author": who,
                "committer": who,
                "parents": commit.parent.iter().map(|p| json!({
                    "url": format!("{}/api/v1/repos/{full}/git/commits/{p}", self.base),
                    "sha": p,
                    "created": time(commit.time),
                })).collect::<Vec<_>>(),
                "message": format!("{}\n", commit.message),
                "tree": {"url": format!("{}/api/v1/repos/{full}/git/trees/{}", self.base, commit.id), "sha": commit.id},
            },
            "verification": {
                "verified": false,
                "reason": "gpg.error.not_signed_commit",
                "signature": "",
                "signer": null,
                "payload": "",
            },
        })
    }

    pub fn release(&self, r: &Repo, rel: &Release) -> Value {
        let full = format!("{}/{}", r.owner, r.name);
        json!({
            "id": rel.id,
            "tag_name": rel.tag,
            "target_commitish": rel.target,
            "name": rel.name,
            "body": rel.body,
            "url": format!("{}/api/v1/repos/{full}/releases/{}", self.base, rel.id),
            "html_url": format!("{}/{full}/releases/tag/{}", self.base, rel.tag),
            "tarball_url": format!("{}/{full}/archive/{}.tar.gz", self.base, rel.tag),
            "zipball_url": format!("{}/{full}/archive/{}.zip", self.base, rel.tag),
            "upload_url": format!("{}/api/v1/repos/{full}/releases/{}/assets", self.base, rel.id),
            "draft": rel.draft,
            "prerelease": rel.prerelease,
            "created_at": time(rel.created),
            "published_at": time(rel.created),
            "author": self.user(&rel.author),
            "assets": [],
        })
    }
}
