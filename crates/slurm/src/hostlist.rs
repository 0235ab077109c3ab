//! Slurm host lists: `n[1-3,7]`, `gpu[01-02],login1`, `rack[1-2]-n[1-2]`.

/// The host names of a Slurm host list, in order. Text that is not a
/// host list (an unclosed bracket) is an error naming it.
pub fn expand(list: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for part in split_top(list) {
        if !part.is_empty() {
            expand_one(part, &mut hosts).map_err(|e| format!("host list `{list}`: {e}"))?;
        }
    }
    Ok(hosts)
}

/// Splits at commas outside brackets.
fn split_top(list: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(list[start..].trim());
    parts
}

fn expand_one(pattern: &str, out: &mut Vec<String>) -> Result<(), String> {
    let Some(open) = pattern.find('[') else {
        out.push(pattern.to_string());
        return Ok(());
    };
    let close = pattern[open..]
        .find(']')
        .map(|c| open + c)
        .ok_or("unclosed `[`")?;
    let (prefix, ranges, rest) = (
        &pattern[..open],
        &pattern[open + 1..close],
        &pattern[close + 1..],
    );
    for range in ranges.split(',') {
        let (low, high) = range.split_once('-').unwrap_or((range, range));
        let parse = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| format!("`{range}` is not a number range"))
        };
        let (from, to) = (parse(low)?, parse(high)?);
        if to < from {
            return Err(format!("`{range}` runs backwards"));
        }
        let width = low.len();
        for n in from..=to {
            expand_one(&format!("{prefix}{n:0width$}{rest}"), out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::expand;

    #[test]
    fn ranges_padding_and_products() {
        assert_eq!(expand("n[1-3,5]").unwrap(), ["n1", "n2", "n3", "n5"]);
        assert_eq!(
            expand("gpu[08-10],login1").unwrap(),
            ["gpu08", "gpu09", "gpu10", "login1"]
        );
        assert_eq!(
            expand("r[1-2]-n[1-2]").unwrap(),
            ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]
        );
        assert_eq!(expand("dave104").unwrap(), ["dave104"]);
        assert!(expand("").unwrap().is_empty());
        assert!(expand("n[1-").unwrap_err().contains("unclosed"));
        assert!(expand("n[3-1]").unwrap_err().contains("backwards"));
    }
}
