//! Numbers in report.json that read back. JSON has no NaN or infinity: serde_json writes them
//! as `null`, which then does not read back as a number, so a report with one such figure could
//! not be opened again. Here a non-finite number is written as the string "NaN", "inf" or
//! "-inf" and read back from it (and `null`, as older reports hold, reads as NaN).

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// The spelling of a non-finite number, None for a finite one.
fn spelling(v: f64) -> Option<&'static str> {
    if v.is_nan() {
        Some("NaN")
    } else if v == f64::INFINITY {
        Some("inf")
    } else if v == f64::NEG_INFINITY {
        Some("-inf")
    } else {
        None
    }
}

/// The number a non-finite spelling stands for.
fn from_spelling(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

/// An f64 as report.json writes it (`#[serde(with = "number")]` on a field).
pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    match spelling(*v) {
        None => s.serialize_f64(*v),
        Some(text) => s.serialize_str(text),
    }
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    d.deserialize_any(NumVisitor).and_then(|n| match n {
        Read::Num(v) => Ok(v),
        Read::Text(t) => Err(de::Error::invalid_value(de::Unexpected::Str(&t), &"a number, \"NaN\", \"inf\" or \"-inf\"")),
        Read::Null => Ok(f64::NAN),
    })
}

/// An f64 that serialises as above, for places a field attribute cannot reach (arrays, tuples).
#[derive(Clone, Copy, Debug)]
pub struct Num(pub f64);

impl Serialize for Num {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize(&self.0, s)
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize(d).map(Num)
    }
}

/// What a JSON value that should be a number turned out to be.
pub(super) enum Read {
    Num(f64),
    /// A string that spells no number.
    Text(String),
    Null,
}

pub(super) struct NumVisitor;

impl<'de> Visitor<'de> for NumVisitor {
    type Value = Read;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number, a string or null")
    }
    fn visit_f64<E>(self, v: f64) -> Result<Read, E> {
        Ok(Read::Num(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Read, E> {
        Ok(Read::Num(v as f64))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Read, E> {
        Ok(Read::Num(v as f64))
    }
    fn visit_str<E>(self, v: &str) -> Result<Read, E> {
        Ok(from_spelling(v).map_or_else(|| Read::Text(v.to_string()), Read::Num))
    }
    fn visit_string<E>(self, v: String) -> Result<Read, E> {
        Ok(from_spelling(&v).map_or(Read::Text(v), Read::Num))
    }
    fn visit_unit<E>(self) -> Result<Read, E> {
        Ok(Read::Null)
    }
    fn visit_none<E>(self) -> Result<Read, E> {
        Ok(Read::Null)
    }
}

/// `#[serde(with = "number::points")]`: a chart series' points.
pub mod points {
    use super::*;

    pub fn serialize<S: Serializer>(v: &[[f64; 2]], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|[x, y]| [Num(*x), Num(*y)]))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<[f64; 2]>, D::Error> {
        Ok(Vec::<[Num; 2]>::deserialize(d)?.into_iter().map(|[x, y]| [x.0, y.0]).collect())
    }
}

/// `#[serde(with = "number::markers")]`: a chart's markers.
pub mod markers {
    use super::*;

    pub fn serialize<S: Serializer>(v: &[(f64, String)], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|(x, label)| (Num(*x), label)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(f64, String)>, D::Error> {
        Ok(Vec::<(Num, String)>::deserialize(d)?.into_iter().map(|(x, label)| (x.0, label)).collect())
    }
}
