//! The body of `POST /v1/predict`, parsed with its bounds checked as it is read: at most
//! `max_inputs` samples, each exactly the model's width of finite numbers. The parse stops at
//! the first value that breaks a bound, so a body can never allocate more than the samples it
//! was allowed to hold (a 16 MiB body of `[]`s is refused at its first `[]`, not after
//! building five million empty vectors).

use std::cell::RefCell;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Most samples in one request (and never more than the queue holds).
pub const MAX_INPUTS_PER_REQUEST: usize = 4096;

/// Why a body was refused: more samples than the server takes (HTTP 413), or not a valid
/// request (400). The message names the problem and what to send instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    TooLarge(String),
    Bad(String),
}

impl Refusal {
    pub fn message(&self) -> &str {
        match self {
            Refusal::TooLarge(m) | Refusal::Bad(m) => m,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

const SHAPE: &str = "send {\"input\": [..]} or {\"inputs\": [[..], ..]}";

/// Parses a predict body into its samples: `{"input": [..]}` (one) or `{"inputs": [[..], ..]}`
/// (at most `max_inputs`), each of `features` finite numbers.
pub fn parse_predict_body(bytes: &[u8], features: usize, max_inputs: usize) -> Result<Vec<Vec<f32>>, Refusal> {
    let refusal = RefCell::new(None);
    let seed = BodySeed { features, max_inputs, refusal: &refusal };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = seed.deserialize(&mut de).and_then(|v| de.end().map(|_| v));
    parsed.map_err(|e| refusal.into_inner().unwrap_or_else(|| Refusal::Bad(format!("malformed JSON body: {e}; {SHAPE}"))))
}

/// The same with the default bound and the refusal as text.
pub fn parse_inputs(bytes: &[u8], features: usize) -> Result<Vec<Vec<f32>>, String> {
    parse_predict_body(bytes, features, MAX_INPUTS_PER_REQUEST).map_err(|r| r.message().to_string())
}

/// Our own refusals go through this side channel (serde's error type only carries text, and
/// would add "at line 1 column N" to a message about the model's width).
type Slot<'a> = &'a RefCell<Option<Refusal>>;

fn refuse<E: de::Error>(slot: Slot, r: Refusal) -> E {
    let e = E::custom(r.message());
    *slot.borrow_mut() = Some(r);
    e
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Key {
    Input,
    Inputs,
}

#[derive(Clone, Copy)]
struct BodySeed<'a> {
    features: usize,
    max_inputs: usize,
    refusal: Slot<'a>,
}

impl<'de> DeserializeSeed<'de> for BodySeed<'_> {
    type Value = Vec<Vec<f32>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for BodySeed<'_> {
    type Value = Vec<Vec<f32>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object {\"input\": [..]} or {\"inputs\": [[..], ..]}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut inputs = None;
        while let Some(key) = map.next_key::<Key>()? {
            if inputs.is_some() {
                return Err(refuse(self.refusal, Refusal::Bad("give either \"input\" or \"inputs\", once".into())));
            }
            inputs = Some(match key {
                Key::Input => vec![map.next_value_seed(RowSeed { which: 0, features: self.features, refusal: self.refusal })?],
                Key::Inputs => map.next_value_seed(RowsSeed(self))?,
            });
        }
        inputs.ok_or_else(|| {
            refuse(self.refusal, Refusal::Bad("the body needs \"input\": [..] (one sample) or \"inputs\": [[..], ..] (several)".into()))
        })
    }
}

struct RowsSeed<'a>(BodySeed<'a>);

impl<'de> DeserializeSeed<'de> for RowsSeed<'_> {
    type Value = Vec<Vec<f32>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for RowsSeed<'_> {
    type Value = Vec<Vec<f32>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of samples [[..], ..]")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let BodySeed { features, max_inputs, refusal } = self.0;
        let mut rows = Vec::new();
        loop {
            if rows.len() == max_inputs {
                // One more element of any kind is one too many; it is skipped, not kept.
                if seq.next_element::<IgnoredAny>()?.is_some() {
                    let m = format!("more than {max_inputs} inputs in one request; send at most {max_inputs} per request");
                    return Err(refuse(refusal, Refusal::TooLarge(m)));
                }
                break;
            }
            match seq.next_element_seed(RowSeed { which: rows.len(), features, refusal })? {
                Some(row) => rows.push(row),
                None => break,
            }
        }
        if rows.is_empty() {
            return Err(refuse(refusal, Refusal::Bad("\"inputs\" is empty; send at least one sample".into())));
        }
        Ok(rows)
    }
}

struct RowSeed<'a> {
    which: usize,
    features: usize,
    refusal: Slot<'a>,
}

impl<'de> DeserializeSeed<'de> for RowSeed<'_> {
    type Value = Vec<f32>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for RowSeed<'_> {
    type Value = Vec<f32>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a sample: a list of {} numbers", self.features)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let (which, features) = (self.which, self.features);
        let mut x = Vec::new();
        while let Some(v) = seq.next_element::<f32>()? {
            if x.len() == features {
                let m = format!("input {which} has more than {features} features; the model takes {features}");
                return Err(refuse(self.refusal, Refusal::Bad(m)));
            }
            if !v.is_finite() {
                // JSON has no NaN or infinity, and serde_json refuses a number beyond f32; kept in
                // case a deserializer ever rounds one to infinity.
                let m = format!("input {which} feature {}: number out of range of a 32-bit float (|x| ≤ 3.4e38)", x.len());
                return Err(refuse(self.refusal, Refusal::Bad(m)));
            }
            if x.is_empty() {
                x.reserve_exact(features);
            }
            x.push(v);
        }
        if x.len() != features {
            return Err(refuse(self.refusal, Refusal::Bad(format!("input {which} has {} features; the model takes {features}", x.len()))));
        }
        Ok(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(rows: usize, width: usize) -> String {
        let row = format!("[{}]", vec!["0.5"; width].join(","));
        format!("{{\"inputs\": [{}]}}", vec![row; rows].join(","))
    }

    #[test]
    fn accepts_one_or_several_samples_of_the_model_width() {
        assert_eq!(parse_predict_body(b"{\"input\": [1, 2.5]}", 2, 4).unwrap(), vec![vec![1.0, 2.5]]);
        assert_eq!(parse_predict_body(body(4, 3).as_bytes(), 3, 4).unwrap().len(), 4);
    }

    #[test]
    fn refuses_more_samples_than_allowed_as_too_large() {
        match parse_predict_body(body(5, 3).as_bytes(), 3, 4) {
            Err(Refusal::TooLarge(m)) => assert!(m.contains("at most 4"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn names_each_problem() {
        let bad = |b: &str| match parse_predict_body(b.as_bytes(), 3, 8) {
            Err(Refusal::Bad(m)) => m,
            other => panic!("{b}: {other:?}"),
        };
        assert!(bad("{\"inputs\": [[1,2,3], [1,2]]}").contains("input 1 has 2 features; the model takes 3"));
        assert!(bad("{\"inputs\": [[1,2,3,4]]}").contains("input 0 has more than 3 features"));
        assert!(bad("{\"inputs\": [[]]}").contains("input 0 has 0 features"));
        assert!(bad("{\"inputs\": []}").contains("empty"));
        let m = bad("{\"input\": [1, 2, 1e39]}");
        assert!(m.contains("number out of range"), "{m}");
        assert!(bad("{}").contains("the body needs"));
        assert!(bad("{\"input\": [1,2,3], \"input\": [1,2,3]}").contains("once"));
        assert!(bad("{\"input\": [1,2,3], \"inputs\": [[1,2,3]]}").contains("once"));
        assert!(bad("{\"input\": [1,2,3], \"extra\": 1}").contains("unknown field"));
        assert!(bad("{\"input\": [1,2,3]} trailing").contains("malformed JSON"));
        assert!(bad("[1,2,3]").contains("malformed JSON"));
        assert!(bad("{\"input\": [1,2,NaN]}").contains("malformed JSON"));
    }

    /// Millions of empty vectors: refused at the first, whatever follows.
    #[test]
    fn a_body_of_empty_vectors_stops_at_the_first() {
        let mut b = String::from("{\"inputs\": [");
        b.push_str(&"[],".repeat(1_000_000));
        b.push_str("[]]}");
        match parse_predict_body(b.as_bytes(), 13, 4096) {
            Err(Refusal::Bad(m)) => assert!(m.contains("input 0 has 0 features"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
