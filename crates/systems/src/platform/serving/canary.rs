//! The canary rollout inside the serving simulation: start at the first share, judge each
//! window with `control::judge`, raise the share, promote, or roll back at once.

use super::{Ev, Sim};
use crate::platform::control::{self, Judgement, VersionStats};
use crate::platform::result::CanaryEvent;
use rand::Rng;

/// The timeline's actions of the evaluation gate.
pub const REFUSED: &str = "refused by the evaluation gate";
pub const PASSED: &str = "passed the evaluation gate";

impl Sim<'_> {
    pub(super) fn canary_start(&mut self) {
        let g = &self.sc.canary.quality_gate;
        if g.enabled {
            // Each held-out sample is right with v2's true accuracy: the measured accuracy
            // scatters around it as a real evaluation's does (bounded by MAX_EVAL_SAMPLES).
            let right = (0..g.eval_samples).filter(|_| self.rng_eval.random::<f64>() < g.v2_accuracy).count();
            let measured = right as f64 / g.eval_samples.max(1) as f64;
            let how = format!(
                "measured accuracy {:.2}% on {} held-out samples, gate {:.2}%",
                measured * 100.0,
                g.eval_samples,
                g.min_accuracy * 100.0
            );
            self.out.eval_accuracy = Some(measured);
            if measured < g.min_accuracy {
                self.canary_event(REFUSED, None, None, how);
                return;
            }
            self.canary_event(PASSED, None, None, how);
        }
        self.canary_step = 0;
        self.canary_share = self.sc.canary.steps[0];
        self.canary_win = Default::default();
        self.q.push(self.now + self.sc.canary.window_s, Ev::CanaryCheck);
        self.canary_event("canary started", None, None, String::new());
    }

    pub(super) fn canary_check(&mut self) {
        let v1 = self.canary_win[0].stats();
        let v2 = self.canary_win[1].stats();
        if v1.served >= control::MIN_CANARY_SAMPLES {
            self.v1_baseline = Some(v1);
        }
        let base = self.v1_baseline.unwrap_or(v1);
        let c = &self.sc.canary;
        let next = self.now + c.window_s;
        match control::judge(c, &base, &v2) {
            Judgement::Wait => {
                self.q.push(next, Ev::CanaryCheck);
                return;
            }
            Judgement::RollBack(why) => {
                self.canary_share = 0.0;
                self.canary_event("rolled back", Some(base), Some(v2), why);
            }
            Judgement::Pass if self.canary_step + 1 == c.steps.len() => {
                self.canary_event("promoted to production", Some(base), Some(v2), "every window passed".into());
            }
            Judgement::Pass => {
                self.canary_step += 1;
                self.canary_share = c.steps[self.canary_step];
                self.q.push(next, Ev::CanaryCheck);
                self.canary_event("share raised", Some(base), Some(v2), "window passed".into());
            }
        }
        self.canary_win = Default::default();
    }

    fn canary_event(&mut self, action: &str, v1: Option<VersionStats>, v2: Option<VersionStats>, reason: String) {
        self.out.canary.push(CanaryEvent { t_h: self.now / 3600.0, action: action.into(), share: self.canary_share, v1, v2, reason });
    }
}
