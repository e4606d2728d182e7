//! A system diagram: boxes on a grid, each with a label, a few metric lines and the settings it
//! was built from, joined by arrows. An exercise emits one as its run advances (the lab redraws
//! it live) and attaches its last state to the report as SVG. Plain data; no drawing toolkit.

use serde::{Deserialize, Serialize};

use super::Provenance;
use super::html::escape as esc;

/// One box: where it sits on the grid, what it shows, and what it was configured with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiagramNode {
    /// Stable id (e.g. "inference"), unique within the diagram.
    pub id: String,
    pub label: String,
    pub col: u32,
    pub row: u32,
    /// Short lines of live figures, e.g. "12 workers serving".
    pub metrics: Vec<String>,
    /// (setting, value) pairs shown when the box is clicked.
    pub settings: Vec<(String, String)>,
    /// Lines that need attention (e.g. firing alerts); drawn highlighted.
    pub alerts: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diagram {
    pub title: String,
    /// What moment the figures describe, e.g. "at 6.50 h simulated".
    pub caption: String,
    pub nodes: Vec<DiagramNode>,
    /// Arrows as (from, to) node indices.
    pub edges: Vec<(usize, usize)>,
    pub provenance: Provenance,
}

/// Grid cell and box sizes of the SVG, in pixels.
const CELL_W: f64 = 250.0;
const BOX_W: f64 = 210.0;
const LINE_H: f64 = 15.0;
const MARGIN: f64 = 20.0;

impl Diagram {
    pub fn node(&self, id: &str) -> Option<&DiagramNode> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// Grid size (columns, rows).
    pub fn grid(&self) -> (u32, u32) {
        let cols = self.nodes.iter().map(|n| n.col + 1).max().unwrap_or(0);
        let rows = self.nodes.iter().map(|n| n.row + 1).max().unwrap_or(0);
        (cols, rows)
    }

    /// Lines inside the tallest box (label + metrics + alerts), which sets every row's height.
    pub fn max_lines(&self) -> usize {
        self.nodes.iter().map(|n| 1 + n.metrics.len() + n.alerts.len()).max().unwrap_or(1)
    }

    /// The diagram as a standalone SVG document: every box with its label, metrics and alerts,
    /// its settings as a tooltip (`<title>`), and an arrow per edge.
    pub fn to_svg(&self) -> String {
        let (cols, rows) = self.grid();
        let box_h = 12.0 + LINE_H * self.max_lines() as f64;
        let cell_h = box_h + 50.0;
        let top = MARGIN + 40.0;
        let (w, h) = (2.0 * MARGIN + CELL_W * cols as f64, top + cell_h * rows as f64 + 30.0);
        let rect = |n: &DiagramNode| (MARGIN + CELL_W * n.col as f64, top + cell_h * n.row as f64);
        let mut s = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w:.0}\" height=\"{h:.0}\" viewBox=\"0 0 {w:.0} {h:.0}\" font-family=\"sans-serif\" font-size=\"12\">\n"
        );
        s += &format!(
            "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n<text x=\"{MARGIN}\" y=\"{}\" font-size=\"16\" font-weight=\"bold\">{}</text>\n",
            MARGIN + 6.0,
            esc(&self.title)
        );
        s += &format!(
            "<text x=\"{MARGIN}\" y=\"{}\" fill=\"#555\">{} · {}</text>\n",
            MARGIN + 24.0,
            esc(&self.caption),
            esc(&self.provenance.label())
        );
        for &(a, b) in &self.edges {
            let (Some(na), Some(nb)) = (self.nodes.get(a), self.nodes.get(b)) else { continue };
            let ((ax, ay), (bx, by)) = (rect(na), rect(nb));
            let (p, q) = edge_points((ax, ay, BOX_W, box_h), (bx, by, BOX_W, box_h));
            s += &format!(
                "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#555\" stroke-width=\"1.5\"/>\n",
                p.0, p.1, q.0, q.1
            );
            // The head as a plain triangle (every SVG renderer draws it; not all draw markers).
            let len = ((q.0 - p.0).powi(2) + (q.1 - p.1).powi(2)).sqrt().max(1e-9);
            let (dx, dy) = ((q.0 - p.0) / len, (q.1 - p.1) / len);
            let (bx, by) = (q.0 - 9.0 * dx, q.1 - 9.0 * dy);
            s += &format!(
                "<polygon points=\"{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\" fill=\"#555\"/>\n",
                q.0,
                q.1,
                bx - 4.5 * dy,
                by + 4.5 * dx,
                bx + 4.5 * dy,
                by - 4.5 * dx
            );
        }
        for n in &self.nodes {
            let (x, y) = rect(n);
            let fill = if n.alerts.is_empty() { "#eef3fb" } else { "#fdecea" };
            s += &format!("<g id=\"node-{}\">\n", esc(&n.id));
            let tip: Vec<String> = n.settings.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            s += &format!("<title>{}</title>\n", esc(&format!("{}\n{}", n.label, tip.join("\n"))));
            s += &format!(
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{BOX_W}\" height=\"{box_h:.1}\" rx=\"6\" fill=\"{fill}\" stroke=\"#345\" stroke-width=\"1.2\"/>\n"
            );
            let mut ly = y + 4.0 + LINE_H;
            s += &format!("<text x=\"{:.1}\" y=\"{ly:.1}\" font-weight=\"bold\">{}</text>\n", x + 8.0, esc(&n.label));
            for m in &n.metrics {
                ly += LINE_H;
                s += &format!("<text x=\"{:.1}\" y=\"{ly:.1}\">{}</text>\n", x + 8.0, esc(m));
            }
            for m in &n.alerts {
                ly += LINE_H;
                s += &format!("<text x=\"{:.1}\" y=\"{ly:.1}\" fill=\"#b3261e\">{}</text>\n", x + 8.0, esc(m));
            }
            s += "</g>\n";
        }
        s += "</svg>\n";
        s
    }
}

/// Where an arrow between two boxes (x, y, w, h) starts and ends: the midpoints of the facing
/// sides (left/right when they share a row, top/bottom otherwise). Also used by the lab.
pub fn edge_points(a: (f64, f64, f64, f64), b: (f64, f64, f64, f64)) -> ((f64, f64), (f64, f64)) {
    let (ca, cb) = ((a.0 + a.2 / 2.0, a.1 + a.3 / 2.0), (b.0 + b.2 / 2.0, b.1 + b.3 / 2.0));
    if (ca.1 - cb.1).abs() < 1.0 {
        if cb.0 >= ca.0 { ((a.0 + a.2, ca.1), (b.0, cb.1)) } else { ((a.0, ca.1), (b.0 + b.2, cb.1)) }
    } else if cb.1 > ca.1 {
        ((ca.0, a.1 + a.3), (cb.0, b.1))
    } else {
        ((ca.0, a.1), (cb.0, b.1 + b.3))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_escapes_text_and_draws_every_box_and_arrow() {
        let node = |id: &str, col| DiagramNode {
            id: id.into(),
            label: format!("{id} <&>"),
            col,
            row: 0,
            metrics: vec!["a \"b\"".into()],
            settings: vec![("k".into(), "v<1".into())],
            alerts: vec![],
        };
        let d = Diagram {
            title: "t".into(),
            caption: "c".into(),
            nodes: vec![node("a", 0), node("b", 1)],
            edges: vec![(0, 1), (0, 9)],
            provenance: Provenance::Measured,
        };
        let svg = d.to_svg();
        assert!(svg.contains("a &lt;&amp;&gt;") && svg.contains("a &quot;b&quot;") && svg.contains("v&lt;1"), "{svg}");
        assert_eq!(svg.matches("<rect x=").count(), 2);
        assert_eq!(svg.matches("<line ").count(), 1, "the edge to a missing node is skipped");
        assert_eq!(d.grid(), (2, 1));
    }

    #[test]
    fn arrows_leave_facing_sides() {
        let a = (0.0, 0.0, 10.0, 10.0);
        assert_eq!(edge_points(a, (20.0, 0.0, 10.0, 10.0)), ((10.0, 5.0), (20.0, 5.0)));
        assert_eq!(edge_points(a, (0.0, 30.0, 10.0, 10.0)), ((5.0, 10.0), (5.0, 30.0)));
        assert_eq!(edge_points((20.0, 0.0, 10.0, 10.0), a), ((20.0, 5.0), (10.0, 5.0)));
    }
}
