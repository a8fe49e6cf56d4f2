//! Reading an embedding answer straight into vectors.
//!
//! An answer may be as large as the HTTP client's bound (64 MiB). Parsed into a
//! `serde_json::Value` first, it would cost many times its size (a map per object, a `Value` of
//! tens of bytes per number, all of it held until the vectors are made), so one broken or
//! hostile server answer could cost a gigabyte or more per request. Here serde drives visitors
//! that keep only what was asked for, as it is read: at most one vector per input, each of at
//! most the model's dimension once that is known, as `f32`s. Everything else (unknown fields,
//! items past the inputs, numbers past the dimension) is skipped as it is read, without
//! recursion, and never held, so an answer costs about the size of the vectors it was asked for.
//!
//! A wrong answer is reported in the client's own words ("no `data` array in the answer", ...):
//! the visitor that meets the problem notes it and stops the parse, and the note is what the
//! caller gets, not the parser's error (which would say only where it stopped).

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::error::{MemoryError, Result};

/// The two answer shapes: OpenAI-compatible `{"data": [{"index", "embedding": [..]}, ..]}` and
/// Ollama's `{"embeddings": [[..], ..]}`, unknown fields ignored in both.
#[derive(Debug, Clone, Copy)]
pub(super) enum Shape {
    OpenAi,
    Ollama,
}

impl Shape {
    /// The field that holds the vectors.
    fn field(self) -> &'static str {
        match self {
            Shape::OpenAi => "data",
            Shape::Ollama => "embeddings",
        }
    }

    /// What a vector that is not a list of numbers is called.
    fn not_numbers(self) -> &'static str {
        match self {
            Shape::OpenAi => "an item has no numeric `embedding`",
            Shape::Ollama => "an embedding is not a list of numbers",
        }
    }
}

/// The vectors of an answer of `shape` to `inputs` texts. With `dimension` known, a longer
/// vector is refused as [`MemoryError::DimensionMismatch`] without being held; a shorter one,
/// fewer vectors than inputs and non-finite components are left to [`super::check_vectors`].
pub(super) fn read(
    shape: Shape,
    bytes: &[u8],
    inputs: usize,
    dimension: Option<usize>,
) -> Result<Vec<Vec<f32>>> {
    let problem = RefCell::new(None);
    let ctx = Ctx {
        shape,
        inputs,
        dimension,
        problem: &problem,
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = de::Deserializer::deserialize_any(&mut de, AnswerVisitor(ctx))
        .and_then(|v| de.end().map(|()| v));
    match (parsed, problem.into_inner()) {
        (_, Some(noted)) => Err(noted),
        (Ok(v), None) => Ok(v),
        (Err(e), None) => Err(MemoryError::EmbedderProtocol(format!(
            "the answer is not JSON: {e}"
        ))),
    }
}

/// What every visitor shares: the question asked and where a problem is noted.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    shape: Shape,
    inputs: usize,
    dimension: Option<usize>,
    problem: &'a RefCell<Option<MemoryError>>,
}

impl Ctx<'_> {
    /// Notes `problem` (the first one stays) and gives the error that stops the parse.
    fn refuse<E: de::Error>(&self, problem: MemoryError) -> E {
        self.problem.borrow_mut().get_or_insert(problem);
        E::custom("refused")
    }

    fn protocol<E: de::Error>(&self, what: impl Into<String>) -> E {
        self.refuse(MemoryError::EmbedderProtocol(what.into()))
    }
}

/// Answers each of the listed kinds of JSON value (`null` is `visit_unit`) with the problem
/// `$what` names, noted: what a visitor does not read is refused, never skipped.
macro_rules! refuse_values {
    ($what:path; $($visit:ident($($t:ty)?)),*) => {$(
        fn $visit<E: de::Error>(self $(, _: $t)?) -> std::result::Result<Self::Value, E> {
            let what = $what(&self);
            Err(self.0.protocol(what))
        }
    )*};
}

/// [`refuse_values`] for every scalar kind.
macro_rules! refuse_scalars {
    ($what:path) => {
        refuse_values!($what; visit_bool(bool), visit_i64(i64), visit_u64(u64), visit_f64(f64),
            visit_str(&str), visit_unit());
    };
}

/// [`refuse_values`] for a list.
macro_rules! refuse_seq {
    ($de:lifetime, $what:path) => {
        fn visit_seq<A: SeqAccess<$de>>(self, _: A) -> std::result::Result<Self::Value, A::Error> {
            let what = $what(&self);
            Err(self.0.protocol(what))
        }
    };
}

/// [`refuse_values`] for an object.
macro_rules! refuse_map {
    ($de:lifetime, $what:path) => {
        fn visit_map<A: MapAccess<$de>>(self, _: A) -> std::result::Result<Self::Value, A::Error> {
            let what = $what(&self);
            Err(self.0.protocol(what))
        }
    };
}

/// The whole answer: an object whose vectors field is read, everything else skipped.
struct AnswerVisitor<'a>(Ctx<'a>);

impl AnswerVisitor<'_> {
    fn missing(&self) -> String {
        format!("no `{}` array in the answer", self.0.shape.field())
    }
}

impl<'de> Visitor<'de> for AnswerVisitor<'_> {
    type Value = Vec<Vec<f32>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an embedding answer")
    }

    refuse_scalars!(Self::missing);
    refuse_seq!('de, Self::missing);

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let ctx = self.0;
        let mut found = None;
        while let Some(wanted) = map.next_key_seed(Key(ctx.shape.field()))? {
            if wanted {
                // A repeated field counts as its last value, as a JSON object's would.
                drop(found.take());
                found = Some(map.next_value_seed(ListSeed(ctx))?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        found.ok_or_else(|| ctx.protocol(self.missing()))
    }
}

/// An object's key: whether it is the one looked for (no key is kept).
struct Key(&'static str);

impl<'de> DeserializeSeed<'de> for Key {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<bool, E> {
        Ok(v == self.0)
    }
}

/// The vectors field: a list of vectors (Ollama) or of items (OpenAI).
struct ListSeed<'a>(Ctx<'a>);

impl ListSeed<'_> {
    fn missing(&self) -> String {
        format!("no `{}` array in the answer", self.0.shape.field())
    }
}

impl<'de> DeserializeSeed<'de> for ListSeed<'_> {
    type Value = Vec<Vec<f32>>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ListSeed<'_> {
    type Value = Vec<Vec<f32>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of embeddings")
    }

    refuse_scalars!(Self::missing);
    refuse_map!('de, Self::missing);

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> std::result::Result<Self::Value, A::Error> {
        match self.0.shape {
            Shape::Ollama => ollama_vectors(self.0, seq),
            Shape::OpenAi => openai_items(self.0, seq),
        }
    }
}

/// Ollama's `embeddings`: one vector per input, in order. Vectors past the inputs are only
/// counted, to say how many came.
fn ollama_vectors<'de, A: SeqAccess<'de>>(
    ctx: Ctx<'_>,
    mut seq: A,
) -> std::result::Result<Vec<Vec<f32>>, A::Error> {
    let mut out = Vec::with_capacity(ctx.inputs);
    while out.len() < ctx.inputs {
        match seq.next_element_seed(VectorSeed(ctx))? {
            Some(v) => out.push(v),
            None => return Ok(out),
        }
    }
    let mut got = out.len();
    while seq.next_element::<IgnoredAny>()?.is_some() {
        got += 1;
    }
    if got > ctx.inputs {
        return Err(ctx.protocol(format!("asked for {} embeddings, got {got}", ctx.inputs)));
    }
    Ok(out)
}

/// OpenAI's `data`: items placed by their `index` (by their position when it is absent). Each
/// input's slot takes one item, so no more vectors than inputs are ever held.
fn openai_items<'de, A: SeqAccess<'de>>(
    ctx: Ctx<'_>,
    mut seq: A,
) -> std::result::Result<Vec<Vec<f32>>, A::Error> {
    let n = ctx.inputs;
    let mut out: Vec<Option<Vec<f32>>> = vec![None; n];
    let mut pos = 0usize;
    while let Some((index, embedding)) = seq.next_element_seed(ItemSeed(ctx))? {
        let index = index.unwrap_or(pos);
        pos += 1;
        let slot = out.get_mut(index).ok_or_else(|| {
            ctx.protocol::<A::Error>(format!("index {index} out of range for {n} inputs"))
        })?;
        if slot.is_some() {
            return Err(ctx.protocol(format!("more than one item has index {index}")));
        }
        *slot = Some(embedding);
    }
    out.into_iter()
        .enumerate()
        .map(|(i, v)| v.ok_or_else(|| ctx.protocol(format!("no embedding for input {i}"))))
        .collect()
}

/// One OpenAI item: its `index` (`None` when absent or `null`) and its `embedding`.
struct ItemSeed<'a>(Ctx<'a>);

impl ItemSeed<'_> {
    fn not_numbers(&self) -> &'static str {
        self.0.shape.not_numbers()
    }
}

impl<'de> DeserializeSeed<'de> for ItemSeed<'_> {
    type Value = (Option<usize>, Vec<f32>);

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ItemSeed<'_> {
    type Value = (Option<usize>, Vec<f32>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an embedding item")
    }

    refuse_scalars!(Self::not_numbers);
    refuse_seq!('de, Self::not_numbers);

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let ctx = self.0;
        let (mut index, mut embedding) = (None, None);
        while let Some(key) = map.next_key_seed(ItemField)? {
            match key {
                ItemKey::Index => index = map.next_value_seed(IndexSeed(ctx))?,
                ItemKey::Embedding => {
                    drop(embedding.take());
                    embedding = Some(map.next_value_seed(VectorSeed(ctx))?);
                }
                ItemKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let embedding = embedding.ok_or_else(|| ctx.protocol::<A::Error>(self.not_numbers()))?;
        Ok((index, embedding))
    }
}

/// The keys of an OpenAI item that are read.
enum ItemKey {
    Index,
    Embedding,
    Other,
}

/// Reads an [`ItemKey`] (no key is kept).
struct ItemField;

impl<'de> DeserializeSeed<'de> for ItemField {
    type Value = ItemKey;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for ItemField {
    type Value = ItemKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<ItemKey, E> {
        Ok(match v {
            "index" => ItemKey::Index,
            "embedding" => ItemKey::Embedding,
            _ => ItemKey::Other,
        })
    }
}

/// An item's `index`: a non-negative integer, or `null` (as if absent: the item's position).
/// Anything else is refused rather than guessed at, since a vector put in the wrong input's
/// place would be stored under another text without any error.
struct IndexSeed<'a>(Ctx<'a>);

impl IndexSeed<'_> {
    fn not_an_index(&self) -> &'static str {
        "an item's `index` is not a non-negative integer"
    }
}

impl<'de> DeserializeSeed<'de> for IndexSeed<'_> {
    type Value = Option<usize>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for IndexSeed<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an index")
    }

    refuse_values!(Self::not_an_index; visit_bool(bool), visit_i64(i64), visit_f64(f64),
        visit_str(&str));
    refuse_seq!('de, Self::not_an_index);
    refuse_map!('de, Self::not_an_index);

    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
        // An index past `usize` is past every input too.
        Ok(Some(usize::try_from(v).unwrap_or(usize::MAX)))
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
}

/// One vector: a list of numbers, as `f32`. Past a known dimension the numbers are only
/// checked and counted, and the vector is refused with its length.
struct VectorSeed<'a>(Ctx<'a>);

impl VectorSeed<'_> {
    fn not_numbers(&self) -> &'static str {
        self.0.shape.not_numbers()
    }
}

impl<'de> DeserializeSeed<'de> for VectorSeed<'_> {
    type Value = Vec<f32>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for VectorSeed<'_> {
    type Value = Vec<f32>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of numbers")
    }

    refuse_scalars!(Self::not_numbers);
    refuse_map!('de, Self::not_numbers);

    fn visit_seq<A: SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let ctx = self.0;
        let cap = ctx.dimension.unwrap_or(usize::MAX);
        // Room for a whole vector of a known dimension (within reason: the dimension may be
        // configured), so it is not grown by doubling.
        let mut v = Vec::with_capacity(ctx.dimension.unwrap_or(0).min(1 << 14));
        while let Some(x) = seq.next_element_seed(NumberSeed(ctx))? {
            if v.len() == cap {
                let mut actual = v.len() + 1;
                while seq.next_element_seed(NumberSeed(ctx))?.is_some() {
                    actual += 1;
                }
                return Err(ctx.refuse(MemoryError::DimensionMismatch {
                    expected: cap,
                    actual,
                }));
            }
            v.push(x);
        }
        Ok(v)
    }
}

/// One component: any JSON number, as the nearest `f32` (one too large for `f32` becomes
/// infinite, which [`super::check_vectors`] refuses).
struct NumberSeed<'a>(Ctx<'a>);

impl NumberSeed<'_> {
    fn not_numbers(&self) -> &'static str {
        self.0.shape.not_numbers()
    }
}

impl<'de> DeserializeSeed<'de> for NumberSeed<'_> {
    type Value = f32;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NumberSeed<'_> {
    type Value = f32;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number")
    }

    refuse_values!(Self::not_numbers; visit_bool(bool), visit_str(&str), visit_unit());
    refuse_seq!('de, Self::not_numbers);
    refuse_map!('de, Self::not_numbers);

    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<f32, E> {
        Ok(v as f32)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<f32, E> {
        Ok(v as f32)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<f32, E> {
        Ok(v as f32)
    }
}
