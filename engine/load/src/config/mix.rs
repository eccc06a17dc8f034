//! The mix, checked: each entry's op (and a template's arguments, parsed into segments),
//! its name, its weight; the weights made cumulative, to draw from.

use super::{Kind, MixEntry, OpPlan, Protocol, Seg};

/// The mix's ops, and their cumulative weights normalised to end at 1.0.
pub(super) fn ops(mix: &[MixEntry], protocol: Protocol) -> Result<(Vec<OpPlan>, Vec<f64>), String> {
    if mix.is_empty() {
        return Err("mix is empty".into());
    }
    let mut ops = Vec::new();
    let mut cumulative = Vec::new();
    let mut acc = 0.0;
    for m in mix {
        if !(m.weight.is_finite() && m.weight >= 0.0) {
            return Err(format!("mix weight for {:?} must be >= 0", m.op));
        }
        let (kind, template) = kind(m, protocol)?;
        let name = m.name.clone().unwrap_or_else(|| m.op.clone());
        if ops.iter().any(|o: &OpPlan| o.name == name) {
            return Err(format!(
                "mix op name {name:?} appears twice (give one a \"name\")"
            ));
        }
        let writes_value = kind == Kind::Set
            || template
                .iter()
                .flatten()
                .any(|s| matches!(s, Seg::Value | Seg::Len));
        acc += m.weight;
        cumulative.push(acc);
        let write =
            matches!(kind, Kind::Set | Kind::Incr) || (kind == Kind::Template && writes_value);
        ops.push(OpPlan {
            name,
            kind,
            template,
            writes_value,
            write,
        });
    }
    if acc <= 0.0 {
        return Err("mix weights sum to zero".into());
    }
    for c in cumulative.iter_mut() {
        *c /= acc;
    }
    Ok((ops, cumulative))
}

/// The kind of entry `m`'s op, and a template's segments (empty for the others).
fn kind(m: &MixEntry, protocol: Protocol) -> Result<(Kind, Vec<Vec<Seg>>), String> {
    let kind = match m.op.as_str() {
        "get" => Kind::Get,
        "gets" => Kind::Gets,
        "set" => Kind::Set,
        "delete" => Kind::Delete,
        "exists" => Kind::Exists,
        "incr" => Kind::Incr,
        "touch" => Kind::Touch,
        "mget" | "get_many" => {
            let n = m.count.unwrap_or(10);
            if n == 0 || n > 10_000 {
                return Err(format!("mget count must be 1..10000, not {n}"));
            }
            Kind::MGet(n)
        }
        "template" if protocol == Protocol::MemcacheBinary => {
            return Err("templates are text commands; protocol memcache_binary has none".into())
        }
        "template" => {
            let template = parse_template(m.args.as_deref().unwrap_or(&[]), protocol.is_resp())?;
            return Ok((Kind::Template, template));
        }
        other => {
            return Err(format!(
                "mix op {other:?} is not one of get, gets, set, delete, exists, incr, touch, mget, template"
            ))
        }
    };
    Ok((kind, Vec::new()))
}

fn parse_template(args: &[String], is_resp: bool) -> Result<Vec<Vec<Seg>>, String> {
    if args.is_empty() {
        return Err("a template op needs a non-empty \"args\" list".into());
    }
    let mut out = Vec::new();
    for a in args {
        let mut segs = Vec::new();
        let mut rest = a.as_str();
        while !rest.is_empty() {
            let next = ["{key}", "{value}", "{ttl}", "{len}"]
                .iter()
                .filter_map(|p| rest.find(p).map(|i| (i, *p)))
                .min();
            match next {
                None => {
                    segs.push(Seg::Lit(rest.as_bytes().to_vec()));
                    rest = "";
                }
                Some((i, p)) => {
                    if i > 0 {
                        segs.push(Seg::Lit(rest.as_bytes()[..i].to_vec()));
                    }
                    segs.push(match p {
                        "{key}" => Seg::Key,
                        "{value}" => Seg::Value,
                        "{ttl}" => Seg::Ttl,
                        _ => Seg::Len,
                    });
                    rest = &rest[i + p.len()..];
                }
            }
        }
        if !is_resp && segs.contains(&Seg::Value) && segs.len() != 1 {
            return Err(format!("template arg {a:?}: in memcached templates {{value}} must stand alone (it is sent as the data block)"));
        }
        if !is_resp && a.contains(char::is_whitespace) {
            return Err(format!(
                "template arg {a:?}: memcached arguments cannot contain whitespace"
            ));
        }
        out.push(segs);
    }
    if !is_resp && out.iter().filter(|s| s.as_slice() == [Seg::Value]).count() > 1 {
        return Err("a memcached template can carry at most one {value}".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates() {
        let t = parse_template(
            &[
                "HSET".into(),
                "h:{key}".into(),
                "f".into(),
                "{value}".into(),
            ],
            true,
        )
        .unwrap();
        assert_eq!(t[1], vec![Seg::Lit(b"h:".to_vec()), Seg::Key]);
        assert!(parse_template(&["append".into(), "x{value}".into()], false).is_err());
    }
}
