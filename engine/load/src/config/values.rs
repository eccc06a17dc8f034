//! The values section, checked: value sizes, weighted or a range, each at most 64 MiB.

use super::ValuesConfig;
use crate::keyspace::ValueSizes;

/// The largest value the engine writes.
const MAX_VALUE: usize = 64 * 1024 * 1024;

/// The value sizes of section `v`: weighted sizes, or `min`..`max`; 100 B when not given.
pub(super) fn sizes(v: &ValuesConfig) -> Result<ValueSizes, String> {
    Ok(match (&v.sizes, v.min, v.max) {
        (Some(list), None, None) => {
            if list.is_empty() {
                return Err("values.sizes is empty".into());
            }
            let mut acc = 0.0;
            let mut cumulative = Vec::new();
            for &(size, w) in list {
                if size > MAX_VALUE || !(w.is_finite() && w >= 0.0) {
                    return Err(format!("values.sizes entry [{size}, {w}] is out of range"));
                }
                acc += w;
                cumulative.push(acc);
            }
            if acc <= 0.0 {
                return Err("values.sizes weights sum to zero".into());
            }
            ValueSizes::Weighted {
                sizes: list.iter().map(|x| x.0).collect(),
                cumulative,
            }
        }
        (None, Some(min), Some(max)) => {
            if min > max || max > MAX_VALUE {
                return Err(format!("values min {min} / max {max} are out of range"));
            }
            ValueSizes::Range { min, max }
        }
        (None, None, None) => ValueSizes::Weighted {
            sizes: vec![100],
            cumulative: vec![1.0],
        },
        _ => return Err("values takes either \"sizes\" or \"min\" and \"max\"".into()),
    })
}
