//! The stand-in's data: a small seeded Gitea instance (two people, one organization, two private
//! repositories with labels, a milestone, issues, a pull request, branches, files and a release)
//! and the JSON shapes Gitea's `/api/v1` answers with (`User`, `Repository`, `Issue`, `Comment`,
//! `PullRequest`, `Branch`, `ContentsResponse`, `FileResponse`, `Label`, `Milestone`, `Release`),
//! field for field from Gitea 1.25's swagger definitions. The repositories use the SHA-256 object
//! format (`object_format_name: "sha256"`, which Gitea supports since 1.22), so commit and blob ids
//! are real git ids of the seeded content computed with `sha2`.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// When the seeded objects were made (2026-11-30T09:00:00Z).
pub const SEEDED_AT: i64 = 1_796_029_200;

/// A person or an organization (Gitea keeps both as users).
#[derive(Debug, Clone)]
pub struct Account {
    pub id: i64,
    pub login: String,
    pub full_name: String,
    pub is_org: bool,
}

/// A repository and who may write to it.
#[derive(Debug, Clone)]
pub struct Repo {
    pub id: i64,
    pub owner: String,
    pub name: String,
    pub description: String,
    pub private: bool,
    pub default_branch: String,
    /// Logins with read and write access besides the owner.
    pub members: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Label {
    pub id: i64,
    pub repo_id: i64,
    pub name: String,
    pub color: String,
    pub description: String,
}

#[derive(Debug, Clone)]
pub struct Milestone {
    pub id: i64,
    pub repo_id: i64,
    pub title: String,
    pub description: String,
    pub open: bool,
}

/// The pull-request half of an issue (Gitea numbers both in one sequence).
#[derive(Debug, Clone)]
pub struct Pull {
    pub id: i64,
    pub head: String,
    pub base: String,
    pub draft: bool,
    pub merged_at: Option<i64>,
    pub merged_by: Option<String>,
    pub merge_commit: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Issue {
    pub id: i64,
    pub repo_id: i64,
    pub number: i64,
    pub poster: String,
    pub title: String,
    pub body: String,
    pub open: bool,
    pub labels: Vec<i64>,
    pub milestone: Option<i64>,
    pub assignees: Vec<String>,
    pub created: i64,
    pub updated: i64,
    pub closed: Option<i64>,
    pub pull: Option<Pull>,
}

#[derive(Debug, Clone)]
pub struct Comment {
    pub id: i64,
    pub repo_id: i64,
    pub issue_number: i64,
    pub poster: String,
    pub body: String,
    pub created: i64,
}

/// A commit with its whole (small) tree.
#[derive(Debug, Clone)]
pub struct Commit {
    pub id: String,
    pub message: String,
    pub author: String,
    pub time: i64,
    pub parent: Option<String>,
    pub tree: BTreeMap<String, Vec<u8>>,
}

#[derive(Debug, Clone)]
pub struct Release {
    pub id: i64,
    pub repo_id: i64,
    pub tag: String,
    pub target: String,
    pub name: String,
    pub body: String,
    pub draft: bool,
    pub prerelease: bool,
    pub author: String,
    pub created: i64,
}

/// Everything the instance holds.
#[derive(Debug, Default)]
pub struct Instance {
    pub accounts: Vec<Account>,
    pub repos: Vec<Repo>,
    pub labels: Vec<Label>,
    pub milestones: Vec<Milestone>,
    pub issues: Vec<Issue>,
    pub comments: Vec<Comment>,
    pub commits: BTreeMap<String, Commit>,
    /// (repo id, branch name) -> commit id.
    pub branches: BTreeMap<(i64, String), String>,
    pub releases: Vec<Release>,
    next_id: i64,
}

/// The SHA-256 git id of an object: `sha256("<kind> <len>\0" + body)`.
pub fn git_id(kind: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(format!("{kind} {}\0", body.len()).as_bytes());
    h.update(body);
    hex(&h.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// RFC 3339 in UTC, as Gitea writes times.
pub fn time(unix: i64) -> String {
    chrono::DateTime::from_timestamp(unix, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Seconds since the epoch, now.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(SEEDED_AT)
}

impl Instance {
    /// The seeded instance; `people` are the logins that get accounts (alice and bob always do),
    /// all of them members of the `acme` organization.
    pub fn seeded<'a>(people: impl IntoIterator<Item = &'a str>) -> Self {
        let mut me = Self {
            next_id: 100,
            ..Self::default()
        };
        let mut logins = vec!["alice".to_owned(), "bob".to_owned()];
        for p in people {
            if !logins.iter().any(|l| l == p) {
                logins.push(p.to_owned());
            }
        }
        for login in &logins {
            let id = me.id();
            me.accounts.push(Account {
                id,
                login: login.clone(),
                full_name: capitalized(login),
                is_org: false,
            });
        }
        let org = me.id();
        me.accounts.push(Account {
            id: org,
            login: "acme".into(),
            full_name: "Acme Tools".into(),
            is_org: true,
        });

        let widgets = me.id();
        me.repos.push(Repo {
            id: widgets,
            owner: "acme".into(),
            name: "widgets".into(),
            description: "Widgets for every workshop".into(),
            private: true,
            default_branch: "main".into(),
            members: logins.clone(),
        });
        let notes = me.id();
        me.repos.push(Repo {
            id: notes,
            owner: "alice".into(),
            name: "notes".into(),
            description: "Alice's notes".into(),
            private: true,
            default_branch: "main".into(),
            members: Vec::new(),
        });

        let main = me.commit(
            None,
            "alice",
            "Initial import",
            SEEDED_AT,
            &[
                ("README.md", "# widgets\n\nWidgets for every workshop.\n"),
                (
                    "src/lib.rs",
                    "pub fn widget() -> &'static str {\n    \"widget\"\n}\n",
                ),
            ],
        );
        let retry = me.commit(
            Some(&main),
            "bob",
            "Retry a failed widget fetch",
            SEEDED_AT + 600,
            &[("src/retry.rs", "pub const ATTEMPTS: u32 = 3;\n")],
        );
        me.branches.insert((widgets, "main".into()), main.clone());
        me.branches.insert((widgets, "feature/retry".into()), retry);
        let notes_main = me.commit(
            None,
            "alice",
            "First note",
            SEEDED_AT,
            &[("todo.md", "- water the plants\n")],
        );
        me.branches.insert((notes, "main".into()), notes_main);

        for (name, color, description) in [
            ("bug", "ee0701", "Something is not working"),
            ("enhancement", "84b6eb", "New feature or request"),
        ] {
            let id = me.id();
            me.labels.push(Label {
                id,
                repo_id: widgets,
                name: name.into(),
                color: color.into(),
                description: description.into(),
            });
        }
        let bug = me.labels[0].id;
        let m1 = me.id();
        me.milestones.push(Milestone {
            id: m1,
            repo_id: widgets,
            title: "v1.0".into(),
            description: "First stable release".into(),
            open: true,
        });

        me.push_issue(
            widgets,
            "alice",
            "Crash on an empty config",
            "Starting with an empty `widgets.toml` panics.",
            vec![bug],
            Some(m1),
            None,
            SEEDED_AT + 100,
        );
        me.push_issue(
            widgets,
            "bob",
            "Retry failed widget fetches",
            "Adds three attempts before giving up.",
            Vec::new(),
            None,
            Some(("feature/retry", "main")),
            SEEDED_AT + 200,
        );
        let done = me.push_issue(
            widgets,
            "bob",
            "Document the widget API",
            "",
            Vec::new(),
            None,
            None,
            SEEDED_AT + 250,
        );
        if let Some(i) = me.issues.iter_mut().find(|i| i.id == done) {
            i.open = false;
            i.closed = Some(SEEDED_AT + 900);
        }
        me.push_comment(widgets, 1, "bob", "Reproduced on main.", SEEDED_AT + 300);
        me.push_comment(widgets, 2, "alice", "Looks good to me.", SEEDED_AT + 700);

        let rel = me.id();
        me.releases.push(Release {
            id: rel,
            repo_id: widgets,
            tag: "v0.1.0".into(),
            target: "main".into(),
            name: "First preview".into(),
            body: "The first widgets.".into(),
            draft: false,
            prerelease: true,
            author: "alice".into(),
            created: SEEDED_AT + 1200,
        });
        me
    }

    /// A fresh id (Gitea's ids are per table; one sequence keeps them distinct and is enough).
    pub fn id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    /// Makes a commit on top of `parent` with `files` added or replaced; returns its id.
    pub fn commit(
        &mut self,
        parent: Option<&str>,
        author: &str,
        message: &str,
        at: i64,
        files: &[(&str, &str)],
    ) -> String {
        let mut tree = parent
            .and_then(|p| self.commits.get(p))
            .map(|c| c.tree.clone())
            .unwrap_or_default();
        for (path, body) in files {
            tree.insert((*path).to_owned(), body.as_bytes().to_vec());
        }
        let listing: String = tree
            .iter()
            .map(|(p, b)| format!("{} {p}\n", git_id("blob", b)))
            .collect();
        let body = format!(
            "tree {}\nparent {}\nauthor {author} {at} +0000\n\n{message}\n",
            git_id("tree", listing.as_bytes()),
            parent.unwrap_or("")
        );
        let id = git_id("commit", body.as_bytes());
        self.commits.insert(
            id.clone(),
            Commit {
                id: id.clone(),
                message: message.to_owned(),
                author: author.to_owned(),
                time: at,
                parent: parent.map(str::to_owned),
                tree,
            },
        );
        id
    }

    /// Adds an issue (or, with `pull = Some((head, base))`, a pull request); returns its id.
    #[allow(clippy::too_many_arguments)]
    pub fn push_issue(
        &mut self,
        repo_id: i64,
        poster: &str,
        title: &str,
        body: &str,
        labels: Vec<i64>,
        milestone: Option<i64>,
        pull: Option<(&str, &str)>,
        at: i64,
    ) -> i64 {
        let id = self.id();
        let number = self.issues.iter().filter(|i| i.repo_id == repo_id).count() as i64 + 1;
        let pull = pull.map(|(head, base)| Pull {
            id: self.id(),
            head: head.to_owned(),
            base: base.to_owned(),
            draft: false,
            merged_at: None,
            merged_by: None,
            merge_commit: None,
        });
        self.issues.push(Issue {
            id,
            repo_id,
            number,
            poster: poster.to_owned(),
            title: title.to_owned(),
            body: body.to_owned(),
            open: true,
            labels,
            milestone,
            assignees: Vec::new(),
            created: at,
            updated: at,
            closed: None,
            pull,
        });
        id
    }

    /// Adds a comment; returns its id.
    pub fn push_comment(
        &mut self,
        repo_id: i64,
        issue_number: i64,
        poster: &str,
        body: &str,
        at: i64,
    ) -> i64 {
        let id = self.id();
        self.comments.push(Comment {
            id,
            repo_id,
            issue_number,
            poster: poster.to_owned(),
            body: body.to_owned(),
            created: at,
        });
        id
    }

    pub fn account(&self, login: &str) -> Option<&Account> {
        self.accounts
            .iter()
            .find(|a| a.login.eq_ignore_ascii_case(login))
    }

    pub fn repo(&self, owner: &str, name: &str) -> Option<&Repo> {
        self.repos
            .iter()
            .find(|r| r.owner.eq_ignore_ascii_case(owner) && r.name.eq_ignore_ascii_case(name))
    }

    /// Whether `who` (None: anonymous) may see `repo`.
    pub fn can_read(&self, repo: &Repo, who: Option<&str>) -> bool {
        !repo.private || who.is_some_and(|w| self.can_write(repo, w))
    }

    pub fn can_write(&self, repo: &Repo, who: &str) -> bool {
        repo.owner == who || repo.members.iter().any(|m| m == who)
    }

    pub fn issue(&self, repo_id: i64, number: i64) -> Option<&Issue> {
        self.issues
            .iter()
            .find(|i| i.repo_id == repo_id && i.number == number)
    }

    /// The commit a ref names: a branch, a release tag, or a full commit id.
    pub fn resolve(&self, repo: &Repo, reference: &str) -> Option<&Commit> {
        if let Some(id) = self.branches.get(&(repo.id, reference.to_owned())) {
            return self.commits.get(id);
        }
        if let Some(rel) = self
            .releases
            .iter()
            .find(|r| r.repo_id == repo.id && r.tag == reference)
        {
            return self.resolve(repo, &rel.target);
        }
        self.commits.get(reference)
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

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
