//! Where a value sits in a JSON text, for messages about the files keadm-batch reads back
//! (a shard's summary.json and journal.jsonl in `batch merge`): the path of the value at a
//! byte offset (`nodes[3].phase`, for serde's errors, which give only a line and column),
//! and where the value at a path starts (for checks made after the file was read).
//!
//! Both walk the text as raw JSON values, which keep their place in it, one level at a
//! time; that is only done for a file being refused, so its cost does not matter.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::value::RawValue;

/// A path from the top of a JSON value: keys and array indices, `nodes[3].name`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JsonPath(Vec<Step>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

impl JsonPath {
    /// The path of the value itself.
    pub fn root() -> JsonPath {
        JsonPath::default()
    }

    /// This path, then the member `key`.
    pub fn key(mut self, key: &str) -> JsonPath {
        self.0.push(Step::Key(key.to_string()));
        self
    }

    /// This path, then the array element `index`.
    pub fn index(mut self, index: usize) -> JsonPath {
        self.0.push(Step::Index(index));
        self
    }

    /// This path, then `rest`.
    pub fn join(mut self, rest: JsonPath) -> JsonPath {
        self.0.extend(rest.0);
        self
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The path of the innermost value of `text` that holds the byte at `offset`: the
    /// root when `text` is not JSON or no value holds it (an error between values).
    pub fn at_offset(text: &str, offset: usize) -> JsonPath {
        let mut path = JsonPath::root();
        let Ok(mut value) = serde_json::from_str::<&RawValue>(text) else {
            return path;
        };
        'descend: loop {
            for (step, child) in children(value) {
                let start = start_in(text, child);
                if (start..start + child.get().len()).contains(&offset) {
                    path.0.push(step);
                    value = child;
                    continue 'descend;
                }
            }
            return path;
        }
    }

    /// Where the value at this path starts in `text`, as a byte offset; `None` when
    /// `text` has no value there.
    pub fn offset_in(&self, text: &str) -> Option<usize> {
        let mut value = serde_json::from_str::<&RawValue>(text).ok()?;
        for step in &self.0 {
            value = children(value)
                .into_iter()
                .find_map(|(s, child)| (s == *step).then_some(child))?;
        }
        Some(start_in(text, value))
    }
}

impl fmt::Display for JsonPath {
    /// `nodes[3].name`; the root is the empty string.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            match step {
                Step::Key(key) if i == 0 => write!(f, "{key}")?,
                Step::Key(key) => write!(f, ".{key}")?,
                Step::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// The values directly inside `value`: an object's members or an array's elements.
fn children(value: &RawValue) -> Vec<(Step, &RawValue)> {
    let text = value.get();
    if let Ok(members) = serde_json::from_str::<BTreeMap<String, &RawValue>>(text) {
        return members
            .into_iter()
            .map(|(key, child)| (Step::Key(key), child))
            .collect();
    }
    serde_json::from_str::<Vec<&RawValue>>(text)
        .map(|elements| {
            elements
                .into_iter()
                .enumerate()
                .map(|(i, child)| (Step::Index(i), child))
                .collect()
        })
        .unwrap_or_default()
}

/// Where `value`, a slice of `text` that serde_json borrowed, starts in it.
fn start_in(text: &str, value: &RawValue) -> usize {
    value.get().as_ptr() as usize - text.as_ptr() as usize
}

/// The 1-based line and column (in bytes, as serde_json counts them) of `offset`.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        before.matches('\n').count() + 1,
        before.len() - line_start + 1,
    )
}

/// The byte offset of a 1-based line and column, as serde_json's errors give them;
/// clamped to the end of `text`.
pub fn offset_of(text: &str, line: usize, column: usize) -> usize {
    let line_start = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum::<usize>();
    (line_start + column.saturating_sub(1)).min(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "{\n  \"run_id\": \"r\",\n  \"nodes\": [\n    {\"name\": \"a\", \"steps\": {\"run\": 1.5}},\n    {\"name\": \"b\"}\n  ]\n}\n";

    #[test]
    fn a_path_is_found_at_an_offset_and_an_offset_at_a_path() {
        let at = |needle: &str| JsonPath::at_offset(TEXT, TEXT.find(needle).unwrap());
        assert_eq!(at("\"b\"").to_string(), "nodes[1].name");
        assert_eq!(at("1.5").to_string(), "nodes[0].steps.run");
        assert_eq!(at("\"r\"").to_string(), "run_id");
        // Between values (at a key, a comma) the innermost value around it.
        assert_eq!(at("\"steps\"").to_string(), "nodes[0]");
        assert!(at("{").is_root());
        assert!(JsonPath::at_offset("not json", 2).is_root());

        let path = JsonPath::root().key("nodes").index(1).key("name");
        assert_eq!(path.offset_in(TEXT), TEXT.find("\"b\""));
        assert_eq!(line_column(TEXT, path.offset_in(TEXT).unwrap()), (5, 14));
        assert_eq!(JsonPath::root().key("nodes").index(2).offset_in(TEXT), None);
        assert_eq!(
            JsonPath::root()
                .key("nodes")
                .join(JsonPath::root().index(0).key("steps"))
                .to_string(),
            "nodes[0].steps"
        );
    }

    #[test]
    fn lines_and_columns_convert_both_ways() {
        for offset in [0, 1, 5, 20, TEXT.len() - 1] {
            let (line, column) = line_column(TEXT, offset);
            assert_eq!(offset_of(TEXT, line, column), offset, "{offset}");
        }
        assert_eq!(line_column(TEXT, 0), (1, 1));
        assert_eq!(offset_of(TEXT, 99, 1), TEXT.len());
    }
}
