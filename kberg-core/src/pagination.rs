//! Cursor pagination of sorted listings (tools, resources, templates, prompts).
//!
//! Every registry lists its items sorted by a unique key, so a cursor is just the last key of
//! the page already seen, encoded so that clients treat it as opaque. A cursor therefore stays
//! valid while items come and go: the next page starts strictly after that key. A leaf module:
//! it knows nothing of what it pages.
//!
//! The other side, reading another server's paginated list, is [`read_pages`]: it follows the
//! cursors within bounds, so a peer whose list never ends cannot hold the reader.

use std::collections::HashSet;
use std::future::Future;

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
    // Saturating: an app may set an unbounded page size (`usize::MAX`), and any cursor makes
    // `start` positive.
    let end = start.saturating_add(limit).min(sorted.len());
    let items = sorted[start..end].to_vec();
    let next_cursor = if end < sorted.len() {
        items.last().map(|t| encode_cursor(key(t)))
    } else {
        None
    };
    Ok(Page { items, next_cursor })
}

/// Why [`read_pages`] did not return a whole list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PagesError<E> {
    /// Reading one page failed.
    #[error(transparent)]
    Page(E),
    /// The peer handed out a cursor it had handed out before: its list would never end.
    #[error("the list repeats a page cursor")]
    RepeatedCursor,
    /// The list had not ended after this many pages.
    #[error("the list did not end after {0} pages")]
    TooManyPages(usize),
}

/// Reads every page of a peer's paginated list: `page` is called with no cursor first, then
/// with each cursor the previous page named, until a page names none. A list that repeats a
/// cursor, or has not ended after `max_pages` pages, is refused instead of being followed for
/// ever (a misbehaving peer would otherwise hold the reader and grow the list without bound).
///
/// ```
/// use kberg_core::{PagesError, read_pages};
/// # futures::executor::block_on(async {
/// // A peer with pages "1" and "2", then the end.
/// let all = read_pages(10, |cursor: Option<String>| async move {
///     Ok::<_, String>(match cursor.as_deref() {
///         None => (vec![1, 2], Some("p2".to_string())),
///         Some(_) => (vec![3], None),
///     })
/// })
/// .await;
/// assert_eq!(all, Ok(vec![1, 2, 3]));
/// // A peer whose every page names the same next page.
/// let endless = read_pages(10, |_| async { Ok::<_, String>((vec![0], Some("again".to_string()))) }).await;
/// assert_eq!(endless, Err(PagesError::RepeatedCursor));
/// # });
/// ```
pub async fn read_pages<T, E, Fut>(
    max_pages: usize,
    mut page: impl FnMut(Option<String>) -> Fut,
) -> Result<Vec<T>, PagesError<E>>
where
    Fut: Future<Output = Result<(Vec<T>, Option<String>), E>>,
{
    let mut items = Vec::new();
    let mut seen = HashSet::new();
    let mut cursor = None;
    for _ in 0..max_pages {
        let (got, next) = page(cursor.take()).await.map_err(PagesError::Page)?;
        items.extend(got);
        match next {
            None => return Ok(items),
            Some(next) if !seen.insert(next.clone()) => return Err(PagesError::RepeatedCursor),
            Some(next) => cursor = Some(next),
        }
    }
    Err(PagesError::TooManyPages(max_pages))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;

    type PageResult = std::future::Ready<Result<(Vec<u32>, Option<String>), String>>;

    /// A peer serving `pages` (each page's items and next cursor), recording the cursors asked.
    fn peer<'a>(
        pages: Vec<(Vec<u32>, Option<&'static str>)>,
        asked: &'a std::cell::RefCell<Vec<Option<String>>>,
    ) -> impl FnMut(Option<String>) -> PageResult + 'a {
        let mut pages = pages.into_iter();
        move |cursor| {
            asked.borrow_mut().push(cursor);
            std::future::ready(
                pages
                    .next()
                    .map(|(items, next)| (items, next.map(str::to_string)))
                    .ok_or_else(|| "asked past the end".to_string()),
            )
        }
    }

    #[test]
    fn a_huge_page_size_after_a_cursor_is_the_rest_of_the_list() {
        let list = ["a", "b", "c"];
        fn key<'b>(s: &'b &str) -> &'b str {
            s
        }
        let first = paginate(&list, key, None, usize::MAX).unwrap();
        assert_eq!(first.items, list);
        assert_eq!(first.next_cursor, None);
        let cursor = encode_cursor("a");
        let rest = paginate(&list, key, Some(&cursor), usize::MAX).unwrap();
        assert_eq!(rest.items, ["b", "c"]);
        assert_eq!(rest.next_cursor, None);
    }

    #[test]
    fn read_pages_follows_each_cursor_in_turn() {
        let asked = std::cell::RefCell::new(Vec::new());
        let pages = vec![
            (vec![1, 2], Some("a")),
            (vec![], Some("b")),
            (vec![3], None),
        ];
        let all = block_on(read_pages(3, peer(pages, &asked)));
        assert_eq!(all, Ok(vec![1, 2, 3]));
        assert_eq!(
            *asked.borrow(),
            [None, Some("a".to_string()), Some("b".to_string())]
        );
    }

    #[test]
    fn read_pages_refuses_a_list_that_does_not_end() {
        let asked = std::cell::RefCell::new(Vec::new());
        // A cursor seen two pages earlier.
        let pages = vec![
            (vec![1], Some("a")),
            (vec![2], Some("b")),
            (vec![3], Some("a")),
        ];
        assert_eq!(
            block_on(read_pages(10, peer(pages, &asked))),
            Err(PagesError::RepeatedCursor)
        );
        // New cursors for ever: stopped at the bound, the next page never asked.
        asked.borrow_mut().clear();
        let pages = vec![
            (vec![1], Some("a")),
            (vec![2], Some("b")),
            (vec![3], Some("c")),
        ];
        assert_eq!(
            block_on(read_pages(2, peer(pages, &asked))),
            Err(PagesError::TooManyPages(2))
        );
        assert_eq!(asked.borrow().len(), 2);
        assert_eq!(
            PagesError::<String>::TooManyPages(2).to_string(),
            "the list did not end after 2 pages"
        );
    }

    #[test]
    fn read_pages_passes_a_page_error_on() {
        let asked = std::cell::RefCell::new(Vec::new());
        let pages = vec![(vec![1], Some("a"))];
        assert_eq!(
            block_on(read_pages(10, peer(pages, &asked))),
            Err(PagesError::Page("asked past the end".to_string()))
        );
    }

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
