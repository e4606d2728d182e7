//! Verdicts built from claims: each sentence carries the condition it asserts, evaluated on the
//! run's numbers, and only the sentences whose condition holds are printed. A fixed sentence the
//! numbers could contradict has no place here: a builder states the condition beside the words
//! (`Claims::claim`), or picks the first of several alternatives that holds (`Claims::one_of`).
//!
//! Tests audit a verdict (`Claims::audit`): an oracle re-evaluates every printed claim's
//! condition from the run's inputs, so a condition that does not say what its sentence says
//! fails there.

use super::Verdict;

/// Where a claim goes in the verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The verdict's summary: its sentences joined in order.
    Summary,
    /// One line of evidence.
    Evidence,
}

/// The condition of a sentence that only reports numbers (a measured or derived figure, a
/// setting): nothing in the run can make it false.
pub const FACT: &str = "reports numbers only";

/// One sentence of a verdict and the condition it asserts.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    /// The condition in words; also the claim's key for tests ("the GPU trained faster than the
    /// CPU"). `FACT` for a sentence that only reports numbers.
    pub condition: &'static str,
    /// What the claim is about where a verdict makes the same claim of several things (a
    /// backend, a scaling mode); empty otherwise.
    pub subject: String,
    /// The condition, evaluated on this run's numbers.
    pub holds: bool,
    /// False for an alternative of `one_of` after the one that was chosen.
    pub chosen: bool,
    pub part: Part,
    pub text: String,
}

impl Claim {
    /// Printed: its condition holds and no earlier alternative was chosen instead.
    pub fn printed(&self) -> bool {
        self.holds && self.chosen
    }
}

/// A verdict under construction: claims in the order they are printed.
#[derive(Clone, Debug, Default)]
pub struct Claims {
    claims: Vec<Claim>,
    subject: String,
}

impl Claims {
    pub fn new() -> Self {
        Self::default()
    }

    /// The claims made after this are about `subject` (a backend, a mode); "" for none.
    pub fn about(&mut self, subject: impl Into<String>) -> &mut Self {
        self.subject = subject.into();
        self
    }

    /// A sentence printed when `holds`, the evaluation of `condition` on the run's numbers.
    pub fn claim(&mut self, part: Part, condition: &'static str, holds: bool, text: impl Into<String>) -> &mut Self {
        self.claims.push(Claim { condition, subject: self.subject.clone(), holds, chosen: true, part, text: text.into() });
        self
    }

    pub fn summary(&mut self, condition: &'static str, holds: bool, text: impl Into<String>) -> &mut Self {
        self.claim(Part::Summary, condition, holds, text)
    }

    pub fn evidence(&mut self, condition: &'static str, holds: bool, text: impl Into<String>) -> &mut Self {
        self.claim(Part::Evidence, condition, holds, text)
    }

    /// A sentence that only reports numbers (`FACT`): always printed.
    pub fn fact(&mut self, part: Part, text: impl Into<String>) -> &mut Self {
        self.claim(part, FACT, true, text)
    }

    /// Alternatives for one place in the verdict: the first whose condition holds is printed,
    /// the others are kept (not printed) for the audit.
    pub fn one_of(&mut self, part: Part, alternatives: Vec<(&'static str, bool, String)>) -> &mut Self {
        let mut taken = false;
        for (condition, holds, text) in alternatives {
            let chosen = !taken;
            taken |= holds;
            self.claims.push(Claim { condition, subject: self.subject.clone(), holds, chosen, part, text });
        }
        self
    }

    /// Appends another builder's claims (e.g. a shared diagnosis) in order.
    pub fn extend(&mut self, other: Claims) -> &mut Self {
        self.claims.extend(other.claims);
        self
    }

    /// Every claim made, printed or not.
    pub fn all(&self) -> &[Claim] {
        &self.claims
    }

    /// The claims that will be printed, in order.
    pub fn printed(&self) -> impl Iterator<Item = &Claim> {
        self.claims.iter().filter(|c| c.printed())
    }

    /// True when some printed claim goes in the summary.
    pub fn has_summary(&self) -> bool {
        self.printed().any(|c| c.part == Part::Summary)
    }

    /// The verdict: the printed summary sentences joined, and the printed evidence lines.
    pub fn verdict(&self) -> Verdict {
        let of = |p: Part| self.printed().filter(move |c| c.part == p).map(|c| c.text.clone());
        Verdict { summary: of(Part::Summary).collect::<Vec<_>>().join(" "), evidence: of(Part::Evidence).collect() }
    }

    /// For tests: `oracle` re-evaluates a claim's condition from the run's inputs (`None`: it
    /// does not know that condition). Every printed claim but a `FACT` must be known and hold;
    /// the error lists each one that is not.
    pub fn audit(&self, oracle: impl Fn(&Claim) -> Option<bool>) -> Result<(), String> {
        let bad: Vec<String> = self
            .printed()
            .filter(|c| c.condition != FACT)
            .filter_map(|c| match oracle(c) {
                Some(true) => None,
                Some(false) => Some(format!("printed, but its condition is false: [{}] {:?} — {}", c.subject, c.condition, c.text)),
                None => Some(format!("no oracle for the condition [{}] {:?} — {}", c.subject, c.condition, c.text)),
            })
            .collect();
        if bad.is_empty() { Ok(()) } else { Err(bad.join("\n")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_claims_that_hold_are_printed_and_the_first_alternative_wins() {
        let mut c = Claims::new();
        c.summary("x > 1", true, "X is large.").summary("x < 1", false, "X is small.");
        c.about("gpu")
            .one_of(Part::Evidence, vec![("never", false, "no".into()), ("first", true, "one".into()), ("second", true, "two".into())]);
        c.fact(Part::Evidence, "x = 2");
        let v = c.verdict();
        assert_eq!(v.summary, "X is large.");
        assert_eq!(v.evidence, ["one", "x = 2"]);
        assert_eq!(c.all().len(), 6, "every claim is kept for the audit");
        assert!(c.has_summary());
        assert_eq!(c.printed().find(|x| x.condition == "first").map(|x| x.subject.as_str()), Some("gpu"));
    }

    #[test]
    fn the_audit_names_printed_claims_whose_condition_is_false_or_unknown() {
        let mut c = Claims::new();
        c.summary("x > 1", true, "X is large.").evidence("y > 1", true, "Y is large.").fact(Part::Evidence, "z = 3");
        assert!(c.audit(|cl| Some(cl.condition == "x > 1" || cl.condition == "y > 1")).is_ok());
        let err = c.audit(|cl| (cl.condition == "x > 1").then_some(false)).unwrap_err();
        assert!(err.contains("condition is false") && err.contains("X is large") && err.contains("no oracle"), "{err}");
        assert!(!err.contains("z = 3"), "facts need no oracle: {err}");
    }
}
