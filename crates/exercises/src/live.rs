//! The live charts an exercise declares: what each chart id it emits (`Event::Point`) means —
//! title, axes with units, log-x, where the numbers come from. The GUI draws whatever is declared,
//! so a new exercise brings its own charts without touching the app (burn-train's learner
//! registers its metrics the same way).

use super::sink::Event;
use gpulab_systems::report::Provenance;

/// One live chart: the id the exercise emits points under, and how to draw them.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveChartSpec {
    pub id: String,
    pub title: String,
    /// Axis labels with their units, e.g. "matrix size n", "GFLOP/s".
    pub x_label: String,
    pub y_label: String,
    /// Plot x on a log scale (sizes that double).
    pub log_x: bool,
    /// Where the points come from (shown under the chart's title).
    pub provenance: Provenance,
}

impl LiveChartSpec {
    /// A line chart of measured points with a linear x axis.
    pub fn line(id: &str, title: &str, x_label: &str, y_label: &str) -> Self {
        LiveChartSpec {
            id: id.into(),
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            log_x: false,
            provenance: Provenance::Measured,
        }
    }

    pub fn log_x(mut self) -> Self {
        self.log_x = true;
        self
    }

    pub fn provenance(mut self, p: Provenance) -> Self {
        self.provenance = p;
        self
    }

    /// What is drawn for an id nobody declared: the id as its title and generic axes, so the
    /// points still show (and the declaration test names the id).
    pub fn undeclared(id: &str) -> Self {
        LiveChartSpec::line(id, &format!("chart “{id}” (not declared by the exercise)"), "x", "y")
    }
}

/// The chart ids in `events` that `declared` does not list, each once, in first-seen order.
pub fn undeclared_ids(declared: &[LiveChartSpec], events: &[Event]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for ev in events {
        if let Event::Point { chart, .. } = ev
            && !declared.iter().any(|d| d.id == *chart)
            && !out.contains(chart)
        {
            out.push(chart.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(chart: &str) -> Event {
        Event::Point { chart: chart.into(), series: "s".into(), x: 1.0, y: 2.0, provenance: Provenance::Measured }
    }

    #[test]
    fn an_undeclared_chart_id_is_named_once() {
        let declared = vec![LiveChartSpec::line("loss", "Training loss", "step", "loss")];
        let events = vec![point("loss"), point("mystery"), Event::Log("x".into()), point("mystery")];
        assert_eq!(undeclared_ids(&declared, &events), vec!["mystery".to_string()]);
        assert!(undeclared_ids(&declared, &events[..1]).is_empty());
    }

    #[test]
    fn every_declaration_is_complete_and_unique() {
        for ex in crate::registry() {
            let specs = ex.live_charts();
            assert!(!specs.is_empty(), "{} runs but declares no live chart", ex.id());
            for (i, s) in specs.iter().enumerate() {
                assert!(
                    !s.id.is_empty() && !s.title.is_empty() && !s.x_label.is_empty() && !s.y_label.is_empty(),
                    "{}: incomplete {s:?}",
                    ex.id()
                );
                assert!(!specs[..i].iter().any(|o| o.id == s.id), "{}: chart {} declared twice", ex.id(), s.id);
            }
        }
    }
}
