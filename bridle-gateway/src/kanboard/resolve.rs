//! Names as well as ids: a project's columns, swimlanes, categories, tags and assignable users,
//! fetched in one JSON-RPC batch, and the resolution of what a model wrote into Kanboard ids.
//!
//! Models remember names ("In progress", "alice") better than ids, and guess ids wrongly.
//! Every argument that names a column, swimlane, category or user takes either; a name is
//! matched case-insensitively, a number written as a string is an id when one has it and else
//! a name, and anything that matches nothing is answered with the valid choices, so the next
//! attempt can succeed.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::client::{Credential, KanboardClient, KanboardError, as_id};

/// A column, swimlane, category, user or tag given by id or by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum NameOrId {
    /// The Kanboard id.
    Id(i64),
    /// The name (case does not matter).
    Name(String),
}

impl std::fmt::Display for NameOrId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NameOrId::Id(id) => write!(f, "{id}"),
            NameOrId::Name(n) => write!(f, "{n}"),
        }
    }
}

/// Something with an id and a name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Named {
    /// Its id.
    pub id: i64,
    /// Its name (title, username).
    pub name: String,
}

/// A name or id that matches nothing in the project.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} `{given}` is not in this project; choose one of: {}", choices.join(", "))]
pub struct ResolveError {
    /// `column`, `swimlane`, `category`, `user`.
    pub what: &'static str,
    /// What was given (cut to [`MAX_ERROR_TEXT`](super::client::MAX_ERROR_TEXT) bytes: it is
    /// quoted back to the agent).
    pub given: String,
    /// The valid choices, as `name (id)`.
    pub choices: Vec<String>,
}

/// What a model needs to turn names into ids in one project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProjectContext {
    /// The project.
    pub project_id: i64,
    /// Columns, in board order.
    pub columns: Vec<Named>,
    /// Active swimlanes, in board order.
    pub swimlanes: Vec<Named>,
    /// Categories.
    pub categories: Vec<Named>,
    /// The project's tags.
    pub tags: Vec<Named>,
    /// Users a task may be assigned to.
    pub assignable_users: Vec<Named>,
}

fn list(v: &Value, name_key: &str) -> Vec<Named> {
    v.as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| {
                    Some(Named {
                        id: as_id(i.get("id")?)?,
                        name: i.get(name_key)?.as_str()?.to_string(),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `getAssignableUsers` answers `{"<id>": "<name>"}`.
fn user_map(v: &Value) -> Vec<Named> {
    let mut out: Vec<Named> = v
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(id, name)| {
                    Some(Named {
                        id: id.parse().ok()?,
                        name: name.as_str()?.to_string(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by_key(|n| n.id);
    out
}

impl ProjectContext {
    /// Fetches columns, swimlanes, categories, tags and assignable users in one batch.
    pub async fn load(
        client: &KanboardClient,
        credential: &Credential,
        project_id: i64,
    ) -> Result<Self, KanboardError> {
        let p = json!({"project_id": project_id});
        let answers = client
            .batch(
                credential,
                &[
                    ("getColumns", p.clone()),
                    ("getActiveSwimlanes", p.clone()),
                    ("getAllCategories", p.clone()),
                    ("getTagsByProject", p.clone()),
                    ("getAssignableUsers", p),
                ],
            )
            .await?;
        let mut it = answers.into_iter();
        let mut next = || it.next().unwrap_or(Ok(Value::Null));
        let (columns, swimlanes, categories, tags, users) =
            (next()?, next()?, next()?, next()?, next()?);
        Ok(Self {
            project_id,
            columns: list(&columns, "title"),
            swimlanes: list(&swimlanes, "name"),
            categories: list(&categories, "name"),
            tags: list(&tags, "name"),
            assignable_users: user_map(&users),
        })
    }

    /// A column's id.
    pub fn column(&self, given: &NameOrId) -> Result<i64, ResolveError> {
        find("column", &self.columns, given)
    }

    /// A swimlane's id.
    pub fn swimlane(&self, given: &NameOrId) -> Result<i64, ResolveError> {
        find("swimlane", &self.swimlanes, given)
    }

    /// A category's id.
    pub fn category(&self, given: &NameOrId) -> Result<i64, ResolveError> {
        find("category", &self.categories, given)
    }

    /// An assignable user's id.
    pub fn user(&self, given: &NameOrId) -> Result<i64, ResolveError> {
        find("user", &self.assignable_users, given)
    }

    /// The name of a column id, if known.
    pub fn column_name(&self, id: i64) -> Option<&str> {
        self.columns
            .iter()
            .find(|c| c.id == id)
            .map(|c| c.name.as_str())
    }
}

fn find(what: &'static str, items: &[Named], given: &NameOrId) -> Result<i64, ResolveError> {
    let found = match given {
        NameOrId::Id(id) => items.iter().find(|i| i.id == *id),
        NameOrId::Name(name) => {
            let name = name.trim();
            // A numeric string is an id too (models often quote ids); one that is no id may
            // still be a name (a swimlane `2026`, a username that is an employee number).
            let by_id = name
                .parse::<i64>()
                .ok()
                .and_then(|id| items.iter().find(|i| i.id == id));
            by_id.or_else(|| {
                items
                    .iter()
                    .find(|i| i.name.to_lowercase() == name.to_lowercase())
            })
        }
    };
    found.map(|i| i.id).ok_or_else(|| ResolveError {
        what,
        given: super::client::clipped(given.to_string()),
        choices: items
            .iter()
            .map(|i| format!("{} ({})", i.name, i.id))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> ProjectContext {
        ProjectContext {
            project_id: 1,
            columns: list(
                &json!([{"id": 1, "title": "Backlog"}, {"id": 2, "title": "In progress"}]),
                "title",
            ),
            swimlanes: list(&json!([{"id": 1, "name": "Default swimlane"}]), "name"),
            categories: vec![],
            tags: vec![],
            assignable_users: user_map(&json!({"1": "admin", "2": "alice"})),
        }
    }

    #[test]
    fn names_ids_and_choices() {
        let c = ctx();
        assert_eq!(c.column(&NameOrId::Name("in PROGRESS".into())), Ok(2));
        assert_eq!(c.column(&NameOrId::Id(1)), Ok(1));
        assert_eq!(c.column(&NameOrId::Name("2".into())), Ok(2));
        // A number that is no id is a name.
        let numbered = ProjectContext {
            swimlanes: list(
                &json!([{"id": 7, "name": "2026"}, {"id": 8, "name": "7"}]),
                "name",
            ),
            ..ctx()
        };
        assert_eq!(numbered.swimlane(&NameOrId::Name("2026".into())), Ok(7));
        assert_eq!(
            numbered.swimlane(&NameOrId::Name("7".into())),
            Ok(7),
            "an id first"
        );
        assert!(numbered.swimlane(&NameOrId::Name("9".into())).is_err());
        assert_eq!(c.user(&NameOrId::Name("alice".into())), Ok(2));
        let e = c.column(&NameOrId::Name("Done".into())).unwrap_err();
        assert_eq!(e.choices, vec!["Backlog (1)", "In progress (2)"]);
        assert!(e.to_string().contains("column `Done`"));
        let e = c.category(&NameOrId::Id(4)).unwrap_err();
        assert!(e.choices.is_empty());
    }
}
