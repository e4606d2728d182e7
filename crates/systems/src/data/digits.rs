//! The UCI "Optical Recognition of Handwritten Digits" set (8x8, values 0..16),
//! embedded in the binary so the lab works offline. See assets/digits/README.md.

use std::io::Read;

use super::{DataError, Dataset};

/// Where the embedded file lives in the source tree (used in error messages).
const ASSET_PATH: &str = "assets/digits/digits.csv.gz";
const DIGITS_GZ: &[u8] = include_bytes!("../../../../assets/digits/digits.csv.gz");

pub const ROWS: usize = 1797;
pub const FEATURES: usize = 64;
pub const CLASSES: usize = 10;
const MAX_VALUE: u32 = 16;
/// Every `VAL_EVERY`-th sample of each class (in file order) goes to validation.
pub const VAL_EVERY: usize = 5;

pub fn load() -> Result<Dataset, DataError> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(DIGITS_GZ)
        .read_to_string(&mut text)
        .map_err(|e| DataError::malformed(ASSET_PATH, format!("corrupt gzip: {e}")))?;
    let (x, y) = parse_csv(&text)?;
    let (train, val) = stratified_split(&y, CLASSES, VAL_EVERY);

    let pick = |rows: &[usize]| {
        let mut xs = Vec::with_capacity(rows.len() * FEATURES);
        for &r in rows {
            xs.extend_from_slice(&x[r * FEATURES..(r + 1) * FEATURES]);
        }
        (xs, rows.iter().map(|&r| y[r]).collect::<Vec<u32>>())
    };
    let (train_x, train_y) = pick(&train);
    let (val_x, val_y) = pick(&val);

    Ok(Dataset {
        name: "digits".into(),
        source: "UCI Optical Recognition of Handwritten Digits (Alpaydin & Kaynak 1998, \
                 doi:10.24432/C50P49), via scikit-learn; CC BY 4.0"
            .into(),
        features: FEATURES,
        shape: [1, 8, 8],
        classes: CLASSES,
        class_names: (0..CLASSES).map(|c| c.to_string()).collect(),
        train_x,
        train_y,
        val_x,
        val_y,
    })
}

/// Parses and validates the CSV: no header, 65 integers a row (64 pixels then
/// the label). Pixels are scaled to [0, 1] by dividing by 16.
fn parse_csv(text: &str) -> Result<(Vec<f32>, Vec<u32>), DataError> {
    let bad = |line: usize, problem: String| DataError::malformed(ASSET_PATH, format!("line {line}: {problem}"));
    let mut x = Vec::with_capacity(ROWS * FEATURES);
    let mut y = Vec::with_capacity(ROWS);
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let mut cols = 0;
        for (c, field) in line.split(',').enumerate() {
            cols += 1;
            if c > FEATURES {
                continue; // counted, reported below
            }
            let v: u32 =
                field.trim().parse().map_err(|_| bad(line_no, format!("column {}: \"{field}\" is not a non-negative integer", c + 1)))?;
            if c < FEATURES {
                if v > MAX_VALUE {
                    return Err(bad(line_no, format!("column {}: pixel value {v} is outside 0..=16", c + 1)));
                }
                x.push(v as f32 / MAX_VALUE as f32);
            } else {
                if v as usize >= CLASSES {
                    return Err(bad(line_no, format!("label {v} is outside 0..=9")));
                }
                y.push(v);
            }
        }
        if cols != FEATURES + 1 {
            return Err(bad(line_no, format!("expected {} columns, found {cols}", FEATURES + 1)));
        }
    }
    if y.len() != ROWS {
        return Err(DataError::malformed(ASSET_PATH, format!("expected {ROWS} rows, found {}", y.len())));
    }
    Ok((x, y))
}

/// Stratified, seed-independent split: within each class, counting samples in
/// file order, the 5th, 10th, 15th, ... go to validation. Both lists keep file order.
fn stratified_split(y: &[u32], classes: usize, every: usize) -> (Vec<usize>, Vec<usize>) {
    let mut seen = vec![0usize; classes];
    let (mut train, mut val) = (Vec::new(), Vec::new());
    for (i, &label) in y.iter().enumerate() {
        let k = &mut seen[label as usize];
        *k += 1;
        if (*k).is_multiple_of(every) { val.push(i) } else { train.push(i) }
    }
    (train, val)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_rows() {
        let row = |label: &str| format!("{}{label}\n", "0,".repeat(64));
        assert!(parse_csv(&row("3")).unwrap_err().to_string().contains("expected 1797 rows"));
        let e = parse_csv(&row("10")).unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("label 10"), "{e}");
        let e = parse_csv("1,2,3\n").unwrap_err().to_string();
        assert!(e.contains("expected 65 columns, found 3"), "{e}");
        let e = parse_csv(&format!("17,{}", row("1"))).unwrap_err().to_string();
        assert!(e.contains("column"), "{e}");
    }

    #[test]
    fn split_is_every_fifth_per_class() {
        let y = [0, 0, 0, 0, 0, 1, 0, 1, 1, 1, 1];
        let (train, val) = stratified_split(&y, 2, 5);
        assert_eq!(val, vec![4, 10]);
        assert_eq!(train.len() + val.len(), y.len());
    }
}
