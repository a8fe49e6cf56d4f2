//! Handles: opaque, wire-safe ids for the app's entities.
//!
//! A model should never see an app's row keys or content hashes: they leak structure, invite
//! guessing (`note 41` exists, so try `note 42`), and outlive the caller's right to them. An app
//! hands out handles instead. A [`HandleCodec`] mints one per (principal, kind, internal id,
//! optional expiry) with the app's secret key and resolves it back. The MCP 2026-07-28 revision
//! removed sessions and tells servers to keep cross-call state in server-minted handles passed
//! as ordinary tool arguments; these are such handles.
//!
//! The construction is deterministic authenticated encryption built from HMAC-SHA256 alone
//! (the SIV pattern): a 128-bit tag is an HMAC over the app id, principal, kind, expiry and
//! internal id; the internal id is encrypted with an HMAC-based keystream keyed by a second,
//! derived key and seeded by that tag. So a handle reveals nothing of the internal id, any
//! change to it (or use by another principal, for another kind, or against another app's key)
//! fails the tag check, and the same entity shown twice to the same principal gets the same
//! handle. The wire form is `h1.` followed by base64url (no padding): expiry (8 bytes, seconds
//! since the epoch, 0 for none), tag (16 bytes), ciphertext. A secret can be rotated: a codec
//! built [`with_previous_secret`](HandleCodec::with_previous_secret) mints with the new one and
//! still resolves handles minted with the old.
//!
//! Tools declare a handle-typed argument with [`Handle<K>`]: its JSON Schema is a string marked
//! `x-kberg-handle: <kind>`, and the gate resolves every such argument (nested, in arrays, maps
//! or tuples, or optional) against the caller before the tool runs, refusing a bad one with
//! `handle_invalid` or `handle_expired` and a pointer to it. The tool receives the internal id.
//! A schema with a handle where the gate would not find it is refused at registration.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

const PREFIX: &str = "h1.";
const TAG_LEN: usize = 16;
const HEADER_LEN: usize = 8 + TAG_LEN;
/// The longest internal id a handle carries, in bytes.
pub const MAX_INTERNAL_ID_LEN: usize = 1024;
/// Longest handle text accepted; anything longer is refused without decoding.
const MAX_HANDLE_LEN: usize = PREFIX.len() + (HEADER_LEN + MAX_INTERNAL_ID_LEN).div_ceil(3) * 4;
/// The JSON Schema keyword that marks a string argument as a handle of a kind.
pub const HANDLE_SCHEMA_KEYWORD: &str = "x-kberg-handle";

/// Why a handle did not resolve, or could not be minted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandleError {
    /// Not a handle this codec minted for this principal and kind (forged, altered, another
    /// app's, another principal's, another kind's, or not a handle at all).
    #[error("not a valid handle")]
    Invalid,
    /// A genuine handle whose expiry has passed.
    #[error("the handle has expired")]
    Expired,
    /// The internal id is longer than [`MAX_INTERNAL_ID_LEN`].
    #[error("internal id is longer than {MAX_INTERNAL_ID_LEN} bytes")]
    IdTooLong,
    /// The secret key is shorter than [`HandleCodec::MIN_SECRET_LEN`].
    #[error(
        "a handle secret must be at least {} bytes",
        HandleCodec::MIN_SECRET_LEN
    )]
    WeakSecret,
    /// No handle codec is configured on the registry.
    #[error("this app has not configured handles")]
    NoCodec,
    /// The system's random source failed while generating a key.
    #[error("no randomness available: {0}")]
    Random(String),
}

/// Mints and resolves handles for one app with its secret key. Cheap to share behind an `Arc`;
/// its `Debug` output never shows the key.
///
/// ```
/// use kberg_core::{HandleCodec, HandleError};
///
/// let codec = HandleCodec::new("notes-app", &[7u8; 32])?;
/// let h = codec.mint("ann", "note", "notes/row-41", None)?;
/// assert!(h.starts_with("h1.") && !h.contains("row-41"));
/// assert_eq!(codec.resolve("ann", "note", &h)?, "notes/row-41");
/// // Another principal, another kind, or any change: not a handle.
/// assert_eq!(codec.resolve("bob", "note", &h), Err(HandleError::Invalid));
/// assert_eq!(codec.resolve("ann", "book", &h), Err(HandleError::Invalid));
/// # Ok::<(), HandleError>(())
/// ```
#[derive(Clone)]
pub struct HandleCodec {
    app: String,
    current: Keys,
    /// Keys of earlier secrets, still accepted when resolving (key rotation).
    previous: Vec<Keys>,
}

/// The two keys derived from one secret.
#[derive(Clone)]
struct Keys {
    mac: [u8; 32],
    enc: [u8; 32],
}

impl Keys {
    fn derive(secret: &[u8]) -> Result<Self, HandleError> {
        if secret.len() < HandleCodec::MIN_SECRET_LEN {
            return Err(HandleError::WeakSecret);
        }
        Ok(Self {
            mac: derive(secret, b"kberg handle v1 mac"),
            enc: derive(secret, b"kberg handle v1 enc"),
        })
    }
}

impl std::fmt::Debug for HandleCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandleCodec")
            .field("app", &self.app)
            .finish_non_exhaustive()
    }
}

fn derive(secret: &[u8], label: &[u8]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC accepts keys of any length");
    mac.update(label);
    mac.finalize().into_bytes().into()
}

fn put_field(mac: &mut HmacSha256, field: &[u8]) {
    mac.update(&(field.len() as u64).to_be_bytes());
    mac.update(field);
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl HandleCodec {
    /// The shortest secret accepted, in bytes.
    pub const MIN_SECRET_LEN: usize = 32;

    /// A codec for `app_id` keyed by `secret` (at least [`Self::MIN_SECRET_LEN`] random bytes,
    /// kept by the app; handles stay valid across restarts as long as the secret does).
    pub fn new(app_id: impl Into<String>, secret: &[u8]) -> Result<Self, HandleError> {
        Ok(Self {
            app: app_id.into(),
            current: Keys::derive(secret)?,
            previous: Vec::new(),
        })
    }

    /// Also accepts handles minted with an earlier `secret` (new handles use the current one),
    /// so a key can be rotated without breaking the handles models still hold. Drop the old
    /// secret once those have expired or no longer matter.
    pub fn with_previous_secret(mut self, secret: &[u8]) -> Result<Self, HandleError> {
        self.previous.push(Keys::derive(secret)?);
        Ok(self)
    }

    /// A codec with a fresh random secret: its handles die with the process.
    pub fn generate(app_id: impl Into<String>) -> Result<Self, HandleError> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| HandleError::Random(e.to_string()))?;
        Self::new(app_id, &secret)
    }

    /// The app id handles are bound to.
    pub fn app_id(&self) -> &str {
        &self.app
    }

    /// The MAC over everything a handle is bound to.
    fn tag_mac(
        &self,
        keys: &Keys,
        principal: &str,
        kind: &str,
        expiry: u64,
        id: &[u8],
    ) -> HmacSha256 {
        let mut mac =
            HmacSha256::new_from_slice(&keys.mac).expect("HMAC accepts keys of any length");
        mac.update(b"kberg handle v1");
        put_field(&mut mac, self.app.as_bytes());
        put_field(&mut mac, principal.as_bytes());
        put_field(&mut mac, kind.as_bytes());
        mac.update(&expiry.to_be_bytes());
        put_field(&mut mac, id);
        mac
    }

    fn tag(&self, principal: &str, kind: &str, expiry: u64, id: &[u8]) -> [u8; TAG_LEN] {
        let full = self
            .tag_mac(&self.current, principal, kind, expiry, id)
            .finalize()
            .into_bytes();
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&full[..TAG_LEN]);
        tag
    }

    fn keystream_xor(keys: &Keys, tag: &[u8; TAG_LEN], data: &mut [u8]) {
        for (block, chunk) in data.chunks_mut(32).enumerate() {
            let mut mac =
                HmacSha256::new_from_slice(&keys.enc).expect("HMAC accepts keys of any length");
            mac.update(tag);
            mac.update(&(block as u32).to_be_bytes());
            let ks = mac.finalize().into_bytes();
            for (b, k) in chunk.iter_mut().zip(ks.iter()) {
                *b ^= k;
            }
        }
    }

    /// Mints the handle of `internal_id` (an entity of `kind`) for `principal`. With
    /// `expires_at`, the handle resolves until that moment (second precision) and then answers
    /// [`HandleError::Expired`].
    pub fn mint(
        &self,
        principal: &str,
        kind: &str,
        internal_id: &str,
        expires_at: Option<SystemTime>,
    ) -> Result<String, HandleError> {
        let id = internal_id.as_bytes();
        if id.len() > MAX_INTERNAL_ID_LEN {
            return Err(HandleError::IdTooLong);
        }
        // 0 means "never"; an expiry at the epoch itself is pushed to 1 (already expired).
        let expiry = expires_at.map_or(0, |t| unix_secs(t).max(1));
        let tag = self.tag(principal, kind, expiry, id);
        let mut bytes = Vec::with_capacity(HEADER_LEN + id.len());
        bytes.extend_from_slice(&expiry.to_be_bytes());
        bytes.extend_from_slice(&tag);
        let start = bytes.len();
        bytes.extend_from_slice(id);
        Self::keystream_xor(&self.current, &tag, &mut bytes[start..]);
        let mut s = String::from(PREFIX);
        URL_SAFE_NO_PAD.encode_string(&bytes, &mut s);
        Ok(s)
    }

    /// Mints a handle that expires `ttl` from now; one too long for the clock to add
    /// (`Duration::MAX`) never expires.
    pub fn mint_for(
        &self,
        principal: &str,
        kind: &str,
        internal_id: &str,
        ttl: Duration,
    ) -> Result<String, HandleError> {
        let expiry = SystemTime::now().checked_add(ttl);
        self.mint(principal, kind, internal_id, expiry)
    }

    /// Resolves `handle` to the internal id, if this codec minted it for `principal` and
    /// `kind` and it has not expired.
    pub fn resolve(
        &self,
        principal: &str,
        kind: &str,
        handle: &str,
    ) -> Result<String, HandleError> {
        self.resolve_at(principal, kind, handle, SystemTime::now())
    }

    /// [`HandleCodec::resolve`] as of `now`.
    pub fn resolve_at(
        &self,
        principal: &str,
        kind: &str,
        handle: &str,
        now: SystemTime,
    ) -> Result<String, HandleError> {
        if handle.len() > MAX_HANDLE_LEN {
            return Err(HandleError::Invalid);
        }
        let body = handle.strip_prefix(PREFIX).ok_or(HandleError::Invalid)?;
        let bytes = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| HandleError::Invalid)?;
        if bytes.len() < HEADER_LEN {
            return Err(HandleError::Invalid);
        }
        let mut expiry_bytes = [0u8; 8];
        expiry_bytes.copy_from_slice(&bytes[..8]);
        let expiry = u64::from_be_bytes(expiry_bytes);
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&bytes[8..HEADER_LEN]);
        for keys in std::iter::once(&self.current).chain(&self.previous) {
            let mut id = bytes[HEADER_LEN..].to_vec();
            Self::keystream_xor(keys, &tag, &mut id);
            // Constant-time comparison of the recomputed tag.
            if self
                .tag_mac(keys, principal, kind, expiry, &id)
                .verify_truncated_left(&tag)
                .is_err()
            {
                continue;
            }
            // Authenticity first, then expiry: an altered expiry is `Invalid`, never `Expired`.
            if expiry != 0 && unix_secs(now) >= expiry {
                return Err(HandleError::Expired);
            }
            return String::from_utf8(id).map_err(|_| HandleError::Invalid);
        }
        Err(HandleError::Invalid)
    }
}

/// A kind of entity handles point at: `note`, `book`, `message`. The kind is part of what a
/// handle is bound to, so a `note` handle never resolves where a `book` is expected.
pub trait HandleKind: Send + Sync + 'static {
    /// The kind's stable name.
    const KIND: &'static str;
}

/// A handle-typed tool argument. On the wire and in the schema it is a string (marked with
/// `x-kberg-handle: <kind>`); by the time the tool sees it, the gate has resolved it, so
/// [`Handle::id`] is the app's internal id. It deliberately does not implement `Serialize`:
/// to put a handle into a result, mint one with [`ToolContext::mint_handle`](crate::ToolContext::mint_handle).
pub struct Handle<K: HandleKind> {
    id: String,
    _kind: PhantomData<fn() -> K>,
}

impl<K: HandleKind> Handle<K> {
    /// The internal id the handle resolved to.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The internal id, owned.
    pub fn into_id(self) -> String {
        self.id
    }
}

impl<K: HandleKind> Clone for Handle<K> {
    fn clone(&self) -> Self {
        Self {
            id: self.id.clone(),
            _kind: PhantomData,
        }
    }
}

impl<K: HandleKind> PartialEq for Handle<K> {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl<K: HandleKind> Eq for Handle<K> {}

impl<K: HandleKind> std::fmt::Debug for Handle<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Handle")
            .field(&K::KIND)
            .field(&self.id)
            .finish()
    }
}

impl<'de, K: HandleKind> Deserialize<'de> for Handle<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self {
            id: String::deserialize(d)?,
            _kind: PhantomData,
        })
    }
}

impl<K: HandleKind> schemars::JsonSchema for Handle<K> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        format!("Handle_{}", K::KIND).into()
    }

    fn json_schema(_gen: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": format!(
                "A `{}` handle exactly as an earlier result gave it (an opaque string).",
                K::KIND
            ),
            HANDLE_SCHEMA_KEYWORD: K::KIND,
        })
    }
}

/// One step from the arguments' root towards a handle argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// The property of this name (`properties`).
    Key(String),
    /// Every array element from this index on (`items`, which starts after any `prefixItems`).
    Items(usize),
    /// The array element at this index (`prefixItems`, or an array-form `items`: a tuple).
    Index(usize),
    /// The value of every property but these, the ones the schema names in `properties`
    /// (`additionalProperties`: a map).
    Values(Vec<String>),
}

/// Where in the arguments a handle of `kind` sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HandleSite {
    pub(crate) path: Vec<Step>,
    pub(crate) kind: String,
}

/// How many schema levels (`$ref`s, `anyOf` branches, properties, items) the collector follows.
/// No real argument nests this deep; a recursive type with a handle does, and is refused.
const MAX_SITE_DEPTH: u32 = 24;

/// Finds the handle arguments a schema declares, computed once at registration. It follows
/// local `$ref`s, `anyOf`/`oneOf`/`allOf`, object `properties`, map values
/// (`additionalProperties`), array `items` and tuple positions (`prefixItems`, array-form
/// `items` with `additionalItems`).
///
/// A handle anywhere else (under `patternProperties`, `not`, `if`, `contains`, ..., behind a
/// `$ref` that does not point into the schema, or deeper than [`MAX_SITE_DEPTH`] levels, as in
/// a recursive type) is an error naming where: the gate would not resolve it, and the tool
/// would receive the caller's raw string as an internal id.
pub(crate) fn handle_sites(schema: &Value) -> Result<Vec<HandleSite>, String> {
    // Most schemas declare no handle: nothing to follow, nothing to refuse.
    if !mentions_handle(schema) {
        return Ok(Vec::new());
    }
    let mut collector = Collector {
        root: schema,
        reaches: HashMap::new(),
        out: Vec::new(),
    };
    collector.collect(schema, &mut Vec::new(), 0)?;
    Ok(collector.out)
}

/// Whether `value` has the handle keyword anywhere, as a key of any object in it.
fn mentions_handle(value: &Value) -> bool {
    match value {
        Value::Object(obj) => {
            obj.contains_key(HANDLE_SCHEMA_KEYWORD) || obj.values().any(mentions_handle)
        }
        Value::Array(items) => items.iter().any(mentions_handle),
        _ => false,
    }
}

/// Whether a handle can be reached from `value`, following its local `$ref`s (`seen` holds the
/// targets already followed, so cycles end). A reference this cannot follow may lead anywhere,
/// so it counts as reaching one. The walk keeps its own stack: a schema is input (an upstream
/// server's tool list), and a chain of tens of thousands of `$ref`s would overflow the thread's
/// stack if each were a call.
fn reaches_handle(value: &Value, root: &Value, seen: &mut HashSet<*const Value>) -> bool {
    let mut next = vec![value];
    while let Some(value) = next.pop() {
        match value {
            Value::Object(obj) => {
                if obj.contains_key(HANDLE_SCHEMA_KEYWORD)
                    || obj.contains_key("$dynamicRef")
                    || obj.contains_key("$recursiveRef")
                {
                    return true;
                }
                if let Some(r) = obj.get("$ref") {
                    match local_ref(r, root) {
                        Some(target) => {
                            if seen.insert(target as *const Value) {
                                next.push(target);
                            }
                        }
                        None => return true,
                    }
                }
                next.extend(obj.values());
            }
            Value::Array(items) => next.extend(items.iter()),
            _ => {}
        }
    }
    false
}

/// The schema a `$ref` of the form `#/json/pointer` (or `#`) names within `root`.
fn local_ref<'s>(r: &Value, root: &'s Value) -> Option<&'s Value> {
    r.as_str()
        .and_then(|r| r.strip_prefix('#'))
        .and_then(|p| root.pointer(p))
}

/// `path` as a JSON pointer into the arguments, `*` standing for every element or value.
fn show(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        out.push('/');
        match step {
            Step::Key(k) => out.push_str(&escape_segment(k)),
            Step::Items(_) | Step::Values(_) => out.push('*'),
            Step::Index(i) => out.push_str(&i.to_string()),
        }
    }
    out
}

/// The walk of [`handle_sites`] over one schema.
struct Collector<'s> {
    root: &'s Value,
    /// Whether a handle can be reached from a schema node, by the node's address (the same
    /// node is asked about again on every path that leads to it).
    reaches: HashMap<*const Value, bool>,
    out: Vec<HandleSite>,
}

impl<'s> Collector<'s> {
    fn reaches(&mut self, node: &'s Value) -> bool {
        let key = node as *const Value;
        if let Some(&known) = self.reaches.get(&key) {
            return known;
        }
        let found = reaches_handle(node, self.root, &mut HashSet::new());
        self.reaches.insert(key, found);
        found
    }

    /// Refuses `sub`, found under `keyword`, if a handle can be reached from it.
    fn refuse_handles_in(
        &mut self,
        sub: &'s Value,
        keyword: &str,
        path: &[Step],
    ) -> Result<(), String> {
        if self.reaches(sub) {
            return Err(format!(
                "a handle argument under `{keyword}` (at `{}`) is not supported: the gate \
                 resolves handles only through properties, maps, array items, tuples, local \
                 `$ref`s and anyOf/oneOf/allOf",
                show(path)
            ));
        }
        Ok(())
    }

    fn collect(
        &mut self,
        schema: &'s Value,
        path: &mut Vec<Step>,
        depth: u32,
    ) -> Result<(), String> {
        // Only a node that leads to a handle is walked: the rest has no site to find.
        if !self.reaches(schema) {
            return Ok(());
        }
        if depth > MAX_SITE_DEPTH {
            return Err(format!(
                "a handle argument at `{}` nests more than {MAX_SITE_DEPTH} schema levels deep \
                 (a recursive type?)",
                show(path)
            ));
        }
        let Some(obj) = schema.as_object() else {
            return Err(format!(
                "a handle argument at `{}` is not in a schema",
                show(path)
            ));
        };
        let prefix_len = obj
            .get("prefixItems")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        for (keyword, sub) in obj {
            match keyword.as_str() {
                HANDLE_SCHEMA_KEYWORD => {
                    let Some(kind) = sub.as_str() else {
                        return Err(format!(
                            "`{HANDLE_SCHEMA_KEYWORD}` at `{}` is not a string",
                            show(path)
                        ));
                    };
                    let site = HandleSite {
                        path: path.clone(),
                        kind: kind.to_string(),
                    };
                    if !self.out.contains(&site) {
                        self.out.push(site);
                    }
                }
                "$ref" => match local_ref(sub, self.root) {
                    Some(target) => self.collect(target, path, depth + 1)?,
                    None => {
                        return Err(format!(
                            "the `$ref` {sub} at `{}` does not point into the schema, so the \
                             handles behind it cannot be found",
                            show(path)
                        ));
                    }
                },
                "anyOf" | "oneOf" | "allOf" if sub.is_array() => {
                    for branch in sub.as_array().into_iter().flatten() {
                        self.collect(branch, path, depth + 1)?;
                    }
                }
                "properties" if sub.is_object() => {
                    for (name, prop) in sub.as_object().into_iter().flatten() {
                        path.push(Step::Key(name.clone()));
                        self.collect(prop, path, depth + 1)?;
                        path.pop();
                    }
                }
                "additionalProperties" => {
                    // Which keys are "additional" depends on `patternProperties` too, whose
                    // regular expressions the gate does not evaluate.
                    if obj.contains_key("patternProperties") {
                        self.refuse_handles_in(sub, keyword, path)?;
                        continue;
                    }
                    let named = obj
                        .get("properties")
                        .and_then(Value::as_object)
                        .map(|p| p.keys().cloned().collect())
                        .unwrap_or_default();
                    path.push(Step::Values(named));
                    self.collect(sub, path, depth + 1)?;
                    path.pop();
                }
                "prefixItems" if sub.is_array() => {
                    for (i, item) in sub.as_array().into_iter().flatten().enumerate() {
                        path.push(Step::Index(i));
                        self.collect(item, path, depth + 1)?;
                        path.pop();
                    }
                }
                "items" => match sub {
                    Value::Array(positions) => {
                        for (i, item) in positions.iter().enumerate() {
                            path.push(Step::Index(i));
                            self.collect(item, path, depth + 1)?;
                            path.pop();
                        }
                    }
                    _ => {
                        path.push(Step::Items(prefix_len));
                        self.collect(sub, path, depth + 1)?;
                        path.pop();
                    }
                },
                // The elements after an array-form `items`; without one it applies to nothing.
                "additionalItems" => match obj.get("items").and_then(Value::as_array) {
                    Some(positions) => {
                        path.push(Step::Items(positions.len()));
                        self.collect(sub, path, depth + 1)?;
                        path.pop();
                    }
                    None => self.refuse_handles_in(sub, keyword, path)?,
                },
                // Definitions apply to the arguments only through a `$ref`, followed above.
                "$defs" | "definitions" => {}
                _ => self.refuse_handles_in(sub, keyword, path)?,
            }
        }
        Ok(())
    }
}

/// Resolves, in place, every handle at `sites` in `args`. On failure, the pointer of the bad
/// argument and why.
pub(crate) fn resolve_sites(
    args: &mut Value,
    sites: &[HandleSite],
    codec: &HandleCodec,
    principal: &str,
) -> Result<(), (String, HandleError)> {
    let now = SystemTime::now();
    for site in sites {
        let mut pointer = String::new();
        resolve_walk(
            args,
            &site.path,
            &site.kind,
            codec,
            principal,
            now,
            &mut pointer,
        )?;
    }
    Ok(())
}

fn escape_segment(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

fn resolve_walk(
    value: &mut Value,
    path: &[Step],
    kind: &str,
    codec: &HandleCodec,
    principal: &str,
    now: SystemTime,
    pointer: &mut String,
) -> Result<(), (String, HandleError)> {
    let Some((step, rest)) = path.split_first() else {
        match value {
            Value::String(h) => {
                let id = codec
                    .resolve_at(principal, kind, h, now)
                    .map_err(|e| (pointer.clone(), e))?;
                *value = Value::String(id);
            }
            // An absent optional.
            Value::Null => {}
            // Another type is refused, never passed on: validation refuses it only if the
            // schema gives the site a type, and a hand-written one may leave it open; the tool
            // would then get the caller's number or list as if it were an internal id.
            _ => return Err((pointer.clone(), HandleError::Invalid)),
        }
        return Ok(());
    };
    let len = pointer.len();
    match (step, value) {
        (Step::Key(k), Value::Object(map)) => {
            if let Some(v) = map.get_mut(k.as_str()) {
                pointer.push('/');
                pointer.push_str(&escape_segment(k));
                resolve_walk(v, rest, kind, codec, principal, now, pointer)?;
                pointer.truncate(len);
            }
        }
        (Step::Items(from), Value::Array(items)) => {
            for (i, v) in items.iter_mut().enumerate().skip(*from) {
                pointer.push('/');
                pointer.push_str(&i.to_string());
                resolve_walk(v, rest, kind, codec, principal, now, pointer)?;
                pointer.truncate(len);
            }
        }
        (Step::Index(i), Value::Array(items)) => {
            if let Some(v) = items.get_mut(*i) {
                pointer.push('/');
                pointer.push_str(&i.to_string());
                resolve_walk(v, rest, kind, codec, principal, now, pointer)?;
                pointer.truncate(len);
            }
        }
        (Step::Values(named), Value::Object(map)) => {
            for (k, v) in map.iter_mut() {
                if named.contains(k) {
                    continue;
                }
                pointer.push('/');
                pointer.push_str(&escape_segment(k));
                resolve_walk(v, rest, kind, codec, principal, now, pointer)?;
                pointer.truncate(len);
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codec() -> HandleCodec {
        HandleCodec::new("notes-app", &[7u8; 32]).unwrap()
    }

    #[test]
    fn round_trip_and_determinism() {
        let c = codec();
        let h = c.mint("ann", "note", "row:42", None).unwrap();
        assert!(h.starts_with("h1."));
        assert!(!h.contains("42"));
        assert!(
            h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        );
        assert_eq!(c.resolve("ann", "note", &h).unwrap(), "row:42");
        assert_eq!(h, c.mint("ann", "note", "row:42", None).unwrap());
        assert_ne!(h, c.mint("bob", "note", "row:42", None).unwrap());
        // Long ids span several keystream blocks.
        let long = "x".repeat(MAX_INTERNAL_ID_LEN);
        let hl = c.mint("ann", "note", &long, None).unwrap();
        assert_eq!(c.resolve("ann", "note", &hl).unwrap(), long);
        assert_eq!(
            c.mint("ann", "note", &format!("{long}y"), None),
            Err(HandleError::IdTooLong)
        );
    }

    #[test]
    fn rotated_secrets_still_resolve_old_handles() {
        let old = codec();
        let h_old = old.mint("ann", "note", "row:1", None).unwrap();
        let rotated = HandleCodec::new("notes-app", &[8u8; 32])
            .unwrap()
            .with_previous_secret(&[7u8; 32])
            .unwrap();
        assert_eq!(rotated.resolve("ann", "note", &h_old).unwrap(), "row:1");
        let h_new = rotated.mint("ann", "note", "row:1", None).unwrap();
        assert_ne!(h_new, h_old);
        assert_eq!(rotated.resolve("ann", "note", &h_new).unwrap(), "row:1");
        // The old codec does not know the new secret.
        assert_eq!(
            old.resolve("ann", "note", &h_new),
            Err(HandleError::Invalid)
        );
        assert_eq!(
            rotated.resolve("bob", "note", &h_old),
            Err(HandleError::Invalid)
        );
        assert!(
            HandleCodec::new("a", &[1u8; 32])
                .unwrap()
                .with_previous_secret(b"short")
                .is_err()
        );
    }

    #[test]
    fn weak_secret_is_refused() {
        assert_eq!(
            HandleCodec::new("a", &[1u8; 31]).unwrap_err(),
            HandleError::WeakSecret
        );
        assert!(!format!("{:?}", codec()).contains("7, 7"));
    }

    #[test]
    fn sites_follow_refs_options_and_arrays() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "note": {"type": "string", "x-kberg-handle": "note"},
                "maybe": {"type": ["string", "null"], "x-kberg-handle": "note"},
                "many": {"type": "array", "items": {"type": "string", "x-kberg-handle": "book"}},
                "inner": {"$ref": "#/$defs/Inner"},
                "opt_inner": {"anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}]}
            },
            "$defs": {"Inner": {"type": "object", "properties": {
                "b": {"type": "string", "x-kberg-handle": "book"}}}}
        });
        let sites = handle_sites(&schema).unwrap();
        assert_eq!(sites.len(), 5);
        assert!(sites.contains(&HandleSite {
            path: vec![Step::Key("many".into()), Step::Items(0)],
            kind: "book".into()
        }));
        assert!(sites.contains(&HandleSite {
            path: vec![Step::Key("opt_inner".into()), Step::Key("b".into())],
            kind: "book".into()
        }));
    }

    #[test]
    fn sites_follow_maps_and_tuples() {
        let handle = serde_json::json!({"type": "string", "x-kberg-handle": "note"});
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": handle},
            "additionalProperties": handle,
            "$defs": {"Pair": {"type": "array", "prefixItems": [handle, {"type": "integer"}],
                "items": handle}},
        });
        let mut schema = schema;
        schema["properties"]["pair"] = serde_json::json!({"$ref": "#/$defs/Pair"});
        schema["properties"]["old"] = serde_json::json!({"type": "array",
            "items": [{"type": "integer"}, handle], "additionalItems": handle});
        let sites = handle_sites(&schema).unwrap();
        let paths: Vec<Vec<Step>> = sites.into_iter().map(|s| s.path).collect();
        let key = |k: &str| Step::Key(k.into());
        for expected in [
            vec![key("b")],
            vec![key("pair"), Step::Index(0)],
            vec![key("pair"), Step::Items(2)],
            vec![key("old"), Step::Index(1)],
            vec![key("old"), Step::Items(2)],
        ] {
            assert!(paths.contains(&expected), "{expected:?} not in {paths:?}");
        }
        // The map's values are every property but the named ones.
        assert!(paths.iter().any(|p| matches!(p.as_slice(),
            [Step::Values(named)] if named.len() == 4 && named.contains(&"a".to_string()))));
        assert_eq!(paths.len(), 6);

        // The values of a map resolve; the named properties are left alone.
        let c = codec();
        let h = c.mint("ann", "note", "row:1", None).unwrap();
        let mut args = serde_json::json!({"a": "plain", "x": h, "y": h, "pair": [h, 1, h]});
        resolve_sites(&mut args, &handle_sites(&schema).unwrap(), &c, "ann").unwrap();
        assert_eq!(
            args,
            serde_json::json!({"a": "plain", "x": "row:1", "y": "row:1",
                "pair": ["row:1", 1, "row:1"]})
        );
    }

    #[test]
    fn a_handle_out_of_the_sites_reach_is_refused() {
        let handle = serde_json::json!({"type": "string", "x-kberg-handle": "note"});
        let mut deep = handle.clone();
        for _ in 0..30 {
            deep = serde_json::json!({"type": "object", "properties": {"n": deep}});
        }
        let recursive = serde_json::json!({"$ref": "#/$defs/T", "$defs": {"T": {
            "type": "object",
            "properties": {"note": handle, "next": {"$ref": "#/$defs/T"}}}}});
        for (schema, why) in [
            (serde_json::json!({"not": handle}), "`not`"),
            (
                serde_json::json!({"if": {"properties": {"a": handle}}}),
                "`if`",
            ),
            (
                serde_json::json!({"patternProperties": {"": handle}}),
                "`patternProperties`",
            ),
            (
                serde_json::json!({"unevaluatedProperties": handle}),
                "`unevaluatedProperties`",
            ),
            (
                serde_json::json!({"items": {"x-kberg-handle": 3}}),
                "not a string",
            ),
            (
                serde_json::json!({"properties": {"a": {"$ref": "other.json#/x"}, "b": handle}}),
                "does not point into the schema",
            ),
            (deep, "levels deep"),
            (recursive, "levels deep"),
        ] {
            let err = handle_sites(&schema).unwrap_err();
            assert!(err.contains(why), "{schema}: {err}");
        }
    }

    /// A schema is input (an upstream's tool list): a long chain of `$ref`s leading to a handle
    /// is refused as too deep, on a small stack, instead of overflowing it.
    #[test]
    fn a_long_ref_chain_is_refused_without_exhausting_the_stack() {
        const LINKS: usize = 20_000;
        let mut defs = serde_json::Map::new();
        for i in 0..LINKS {
            defs.insert(
                format!("a{i}"),
                serde_json::json!({"$ref": format!("#/$defs/a{}", i + 1)}),
            );
        }
        defs.insert(
            format!("a{LINKS}"),
            serde_json::json!({"type": "string", "x-kberg-handle": "note"}),
        );
        let schema = serde_json::json!({"type": "object", "$defs": defs,
            "properties": {"x": {"$ref": "#/$defs/a0"}}});
        let err = std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(move || handle_sites(&schema))
            .unwrap()
            .join()
            .expect("no overflow")
            .unwrap_err();
        assert!(err.contains("levels deep"), "{err}");
    }

    #[test]
    fn what_cannot_hide_a_handle_is_not_refused() {
        let handle = serde_json::json!({"type": "string", "x-kberg-handle": "note"});
        // A recursive type without handles, beside a handle; and an unused definition.
        let schema = serde_json::json!({"type": "object",
            "properties": {"note": handle, "tree": {"$ref": "#/$defs/Tree"}},
            "$defs": {
                "Tree": {"type": "object", "properties": {
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}}},
                "Unused": {"not": handle}}});
        assert_eq!(handle_sites(&schema).unwrap().len(), 1);
        // No handle at all: nothing is followed, not even a reference elsewhere.
        let plain = serde_json::json!({"properties": {"a": {"$ref": "other.json#/x"}}});
        assert_eq!(handle_sites(&plain), Ok(Vec::new()));
    }
}
