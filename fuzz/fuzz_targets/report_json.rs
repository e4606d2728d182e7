//! report.json as compare and the class view read it (`report::parse_json`): any bytes give a
//! report or an error, never a panic. An accepted report renders (every table cell, Markdown,
//! HTML) and writes as JSON that reads back to the same JSON.
#![no_main]

use gpulab_systems::report::{html, markdown, parse_json};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(r) = parse_json(bytes) else { return };
    for t in &r.tables {
        for row in &t.rows {
            for (cell, col) in row.iter().zip(&t.columns) {
                let _ = cell.format(col);
            }
        }
    }
    let _ = markdown(&r);
    let _ = html::to_html(&r);
    let json = serde_json::to_vec(&r).expect("a parsed report serialises");
    let again = parse_json(&json).expect("a written report reads back");
    assert_eq!(serde_json::to_vec(&again).expect("serialises"), json, "the JSON changed on a second write");
});
