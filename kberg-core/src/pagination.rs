//! Cursor pagination of sorted listings (tools, resources, templates, prompts).
//!
//! Every registry lists its items sorted by a unique key, so a cursor is just the last key of
//! the page already seen, encoded so that clients treat it as opaque. A cursor therefore stays
//! valid while items come and go: the next page starts strictly after that key. A leaf module:
//! it knows nothing of what it pages.

/// A page of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The items of this page.
    pub items: Vec<T>,
    /// The cursor of the next page, if there is one.
    pub next_cursor: Option<String>,
}

/// A cursor that this registry did not hand out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid pagination cursor")]
pub struct InvalidCursor;

pub(crate) fn encode_cursor(key: &str) -> String {
    let mut s = String::with_capacity(2 + key.len() * 2);
    s.push_str("k1");
    for b in key.bytes() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

pub(crate) fn decode_cursor(cursor: &str) -> Result<String, InvalidCursor> {
    let hex = cursor.strip_prefix("k1").ok_or(InvalidCursor)?;
    if hex.len() % 2 != 0 {
        return Err(InvalidCursor);
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(hex.get(i..i + 2).ok_or(InvalidCursor)?, 16)
                .map_err(|_| InvalidCursor)
        })
        .collect::<Result<Vec<u8>, _>>()?;
    String::from_utf8(bytes).map_err(|_| InvalidCursor)
}

/// Pages a sorted list by key: items strictly after the cursor's key.
pub(crate) fn paginate<T: Clone>(
    sorted: &[T],
    key: impl Fn(&T) -> &str,
    cursor: Option<&str>,
    limit: usize,
) -> Result<Page<T>, InvalidCursor> {
    let start = match cursor {
        None => 0,
        Some(c) => {
            let after = decode_cursor(c)?;
            sorted.partition_point(|t| key(t) <= after.as_str())
        }
    };
    let limit = limit.max(1);
    let end = (start + limit).min(sorted.len());
    let items = sorted[start..end].to_vec();
    let next_cursor = if end < sorted.len() {
        items.last().map(|t| encode_cursor(key(t)))
    } else {
        None
    };
    Ok(Page { items, next_cursor })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_follow_each_other_and_survive_changes() {
        let items: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        let p1 = paginate(&items, |s| s.as_str(), None, 2).unwrap();
        assert_eq!(p1.items, ["a", "b"]);
        let c = p1.next_cursor.unwrap();
        // "b" removed and "bb" added: the next page still starts after "b".
        let changed: Vec<String> = ["a", "bb", "c", "d", "e"].map(String::from).to_vec();
        let p2 = paginate(&changed, |s| s.as_str(), Some(&c), 2).unwrap();
        assert_eq!(p2.items, ["bb", "c"]);
        let p3 = paginate(&changed, |s| s.as_str(), p2.next_cursor.as_deref(), 2).unwrap();
        assert_eq!(p3.items, ["d", "e"]);
        assert_eq!(p3.next_cursor, None);
    }

    #[test]
    fn foreign_cursors_are_refused() {
        let items = vec!["a".to_string()];
        for bad in ["", "zz", "k1f", "k1zz", "k1ff"] {
            assert_eq!(
                paginate(&items, |s| s.as_str(), Some(bad), 1),
                Err(InvalidCursor),
                "{bad}"
            );
        }
    }
}
