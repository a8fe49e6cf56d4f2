//! The stand-in's data: a small seeded Gitea instance (two people, one organization, two private
//! repositories with labels, a milestone, issues, a pull request, branches, files and a release).
//! The repositories use the SHA-256 object format (`object_format_name: "sha256"`, which Gitea
//! supports since 1.22), so commit and blob ids are real git ids of the seeded content computed
//! with `sha2`. How it looks on the wire is `render`'s job.

use std::collections::BTreeMap;

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

pub fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}
