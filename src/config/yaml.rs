//! A YAML document as a tree whose every node knows its line and column.
//!
//! keadm reads its config with Go's `gopkg.in/yaml.v2`, whose leniency operators rely on:
//! YAML 1.1 booleans, numbers read into string fields as their literal text, anchors and
//! `<<` merge keys, the last of duplicated keys winning. No serde YAML crate reproduces all
//! of that and also tells us where every field sits, so we build the tree ourselves from
//! saphyr's event parser and convert it to typed structs in `load.rs`, with the position of
//! each value at hand for error messages.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, ScanError, Span};

/// A 1-based line and column in the config file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

impl std::fmt::Display for Pos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

impl Pos {
    fn from_span(span: &Span) -> Pos {
        Pos {
            line: span.start.line(),
            col: span.start.col() + 1,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// `plain` is false for quoted and block scalars: `"22"` is a string, `22` may be a number.
    Scalar {
        value: String,
        plain: bool,
        pos: Pos,
    },
    Seq {
        items: Vec<Node>,
        pos: Pos,
    },
    Map {
        entries: Vec<(Node, Node)>,
        pos: Pos,
    },
}

impl Node {
    pub fn pos(&self) -> Pos {
        match self {
            Node::Scalar { pos, .. } | Node::Seq { pos, .. } | Node::Map { pos, .. } => *pos,
        }
    }

    /// yaml.v2 reads `key:`, `key: ~` and `key: null` as absent.
    pub fn is_null(&self) -> bool {
        matches!(self, Node::Scalar { value, plain: true, .. }
            if matches!(value.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }

    /// What the node is, for "expected a string, found a mapping" messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Node::Scalar { .. } if self.is_null() => "nothing",
            Node::Scalar { .. } => "a scalar",
            Node::Seq { .. } => "a list",
            Node::Map { .. } => "a mapping",
        }
    }

    /// The text of a scalar key; other keys (rare, legal YAML) have none.
    pub fn key_text(&self) -> Option<&str> {
        match self {
            Node::Scalar { value, .. } => Some(value),
            _ => None,
        }
    }
}

/// A syntax error, with where the parser stopped.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntaxError {
    pub pos: Pos,
    pub message: String,
    pub kind: SyntaxKind,
}

/// Why the text was refused: it is not YAML, or it is YAML that would take too much
/// memory to expand (an alias bomb), which wants another fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyntaxKind {
    Invalid,
    TooManyValues,
}

/// Something suspicious that yaml.v2 accepts silently: we accept it too, and say so.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeWarning {
    pub pos: Pos,
    pub message: String,
}

/// Aliases may expand into more nodes than this; past it the file is refused, so a
/// "billion laughs" config cannot exhaust the control host's memory.
const MAX_NODES: usize = 2_000_000;

/// Sequences and mappings may nest this deep. keadm configs nest about six levels; the
/// tree is built (and dropped) recursively, so a limit keeps a file of a hundred thousand
/// `- ` from overflowing the stack (block sequences have no limit in the parser).
const MAX_DEPTH: usize = 64;

/// Parses the first document of `text` (yaml.v2 reads only the first). `Ok(None)` for a
/// file with no document or only comments.
pub fn parse(text: &str) -> Result<(Option<Node>, Vec<TreeWarning>), SyntaxError> {
    let mut builder = Builder {
        parser: Parser::new_from_str(text),
        anchors: HashMap::new(),
        warnings: Vec::new(),
        nodes: 0,
        depth: 0,
    };
    let root = builder.document()?;
    Ok((root, builder.warnings))
}

struct Builder<'a> {
    parser: Parser<'a, saphyr_parser::StrInput<'a>>,
    anchors: HashMap<usize, Node>,
    warnings: Vec<TreeWarning>,
    nodes: usize,
    /// Sequences and mappings open around the node being built.
    depth: usize,
}

fn syntax_error(err: &ScanError) -> SyntaxError {
    SyntaxError {
        kind: SyntaxKind::Invalid,
        pos: Pos {
            line: err.marker().line(),
            col: err.marker().col() + 1,
        },
        message: err.info().to_string(),
    }
}

impl<'a> Builder<'a> {
    fn next(&mut self) -> Result<(Event<'a>, Span), SyntaxError> {
        match self.parser.next_event() {
            Some(Ok(ev)) => Ok(ev),
            Some(Err(err)) => Err(syntax_error(&err)),
            None => Ok((Event::StreamEnd, Span::default())),
        }
    }

    fn document(&mut self) -> Result<Option<Node>, SyntaxError> {
        loop {
            let (event, span) = self.next()?;
            match event {
                Event::StreamStart | Event::Nothing => continue,
                Event::DocumentStart(_) => {
                    let (event, span) = self.next()?;
                    if matches!(event, Event::DocumentEnd) {
                        return Ok(None);
                    }
                    let node = self.node(event, span)?;
                    return Ok(Some(node));
                }
                Event::StreamEnd => return Ok(None),
                _ => {
                    return Err(SyntaxError {
                        kind: SyntaxKind::Invalid,
                        pos: Pos::from_span(&span),
                        message: "unexpected content before the document".into(),
                    });
                }
            }
        }
    }

    fn count(&mut self, pos: Pos) -> Result<(), SyntaxError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(SyntaxError {
                pos,
                message: format!(
                    "the document expands to more than {MAX_NODES} values through aliases"
                ),
                kind: SyntaxKind::TooManyValues,
            });
        }
        Ok(())
    }

    fn node(&mut self, event: Event<'a>, span: Span) -> Result<Node, SyntaxError> {
        let pos = Pos::from_span(&span);
        self.count(pos)?;
        match event {
            Event::Scalar(value, style, anchor, _tag) => {
                let node = Node::Scalar {
                    value: value.into_owned(),
                    plain: matches!(style, ScalarStyle::Plain),
                    pos,
                };
                self.remember(anchor, &node);
                Ok(node)
            }
            Event::Alias(id) => match self.anchors.get(&id) {
                Some(node) => {
                    let node = node.clone();
                    self.nodes += count_nodes(&node);
                    if self.nodes > MAX_NODES {
                        return self.count(pos).map(|_| node);
                    }
                    Ok(node)
                }
                None => Err(SyntaxError {
                    kind: SyntaxKind::Invalid,
                    pos,
                    message: "alias to an unknown anchor".into(),
                }),
            },
            Event::SequenceStart(anchor, _tag) => {
                self.enter(pos)?;
                let mut items = Vec::new();
                loop {
                    let (event, span) = self.next()?;
                    if matches!(event, Event::SequenceEnd) {
                        break;
                    }
                    items.push(self.node(event, span)?);
                }
                self.depth -= 1;
                let node = Node::Seq { items, pos };
                self.remember(anchor, &node);
                Ok(node)
            }
            Event::MappingStart(anchor, _tag) => {
                self.enter(pos)?;
                let node = self.mapping(pos)?;
                self.depth -= 1;
                self.remember(anchor, &node);
                Ok(node)
            }
            other => Err(SyntaxError {
                kind: SyntaxKind::Invalid,
                pos,
                message: format!("unexpected YAML event {other:?}"),
            }),
        }
    }

    fn enter(&mut self, pos: Pos) -> Result<(), SyntaxError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(SyntaxError {
                kind: SyntaxKind::Invalid,
                pos,
                message: format!("the document nests more than {MAX_DEPTH} levels deep"),
            });
        }
        Ok(())
    }

    fn remember(&mut self, anchor: usize, node: &Node) {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
    }

    /// Builds a mapping, applying `<<` merge keys (explicit keys win over merged ones,
    /// earlier merge sources win over later ones) and keeping the last of duplicated keys.
    fn mapping(&mut self, pos: Pos) -> Result<Node, SyntaxError> {
        let mut explicit: Vec<(Node, Node)> = Vec::new();
        let mut merged: Vec<(Node, Node)> = Vec::new();
        loop {
            let (event, span) = self.next()?;
            if matches!(event, Event::MappingEnd) {
                break;
            }
            let key = self.node(event, span)?;
            let (event, span) = self.next()?;
            let value = self.node(event, span)?;
            if matches!(&key, Node::Scalar { value, plain: true, .. } if value == "<<") {
                self.merge_into(&mut merged, value)?;
                continue;
            }
            if let Some(key_text) = key.key_text()
                && let Some(existing) = explicit
                    .iter()
                    .position(|(k, _)| k.key_text() == Some(key_text))
            {
                let first = explicit[existing].0.pos();
                self.warnings.push(TreeWarning {
                    pos: key.pos(),
                    message: format!(
                        "the key `{key_text}` appears again (first at line {}); the last value is used, as keadm does",
                        first.line
                    ),
                });
                explicit.remove(existing);
            }
            explicit.push((key, value));
        }
        for (key, value) in merged {
            let shadowed = explicit
                .iter()
                .any(|(k, _)| k.key_text().is_some() && k.key_text() == key.key_text());
            if !shadowed {
                explicit.push((key, value));
            }
        }
        Ok(Node::Map {
            entries: explicit,
            pos,
        })
    }

    fn merge_into(
        &mut self,
        merged: &mut Vec<(Node, Node)>,
        source: Node,
    ) -> Result<(), SyntaxError> {
        match source {
            Node::Map { entries, .. } => {
                for (key, value) in entries {
                    let present = merged
                        .iter()
                        .any(|(k, _)| k.key_text().is_some() && k.key_text() == key.key_text());
                    if !present {
                        merged.push((key, value));
                    }
                }
                Ok(())
            }
            Node::Seq { items, .. } => {
                for item in items {
                    self.merge_into(merged, item)?;
                }
                Ok(())
            }
            other => Err(SyntaxError {
                kind: SyntaxKind::Invalid,
                pos: other.pos(),
                message: "a `<<` merge key needs a mapping or a list of mappings".into(),
            }),
        }
    }
}

fn count_nodes(node: &Node) -> usize {
    match node {
        Node::Scalar { .. } => 1,
        Node::Seq { items, .. } => 1 + items.iter().map(count_nodes).sum::<usize>(),
        Node::Map { entries, .. } => {
            1 + entries
                .iter()
                .map(|(k, v)| count_nodes(k) + count_nodes(v))
                .sum::<usize>()
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn map_get<'n>(node: &'n Node, key: &str) -> &'n Node {
        match node {
            Node::Map { entries, .. } => {
                &entries
                    .iter()
                    .find(|(k, _)| k.key_text() == Some(key))
                    .unwrap()
                    .1
            }
            _ => panic!("not a map"),
        }
    }

    fn text(node: &Node) -> &str {
        match node {
            Node::Scalar { value, .. } => value,
            _ => panic!("not a scalar"),
        }
    }

    #[test]
    fn positions_are_one_based() {
        let (root, _) = parse("a: 1\nb:\n  c: x\n").unwrap();
        let root = root.unwrap();
        let c = map_get(map_get(&root, "b"), "c");
        assert_eq!(c.pos(), Pos { line: 3, col: 6 });
    }

    #[test]
    fn deep_nesting_is_a_syntax_error_not_a_stack_overflow() {
        // Block sequences (`- - - x`) have no nesting limit in the parser; flow
        // collections hit the parser's own limit first.
        let deep = format!("{}x", "- ".repeat(100_000));
        let err = parse(&deep).unwrap_err();
        assert_eq!(err.message, "the document nests more than 64 levels deep");
        let flow = format!("{}x{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse(&flow).is_err());
        let ok = format!("{}x{}", "[".repeat(64), "]".repeat(64));
        assert!(parse(&ok).is_ok());
    }

    #[test]
    fn merge_keys_and_anchors() {
        let src = "base: &b\n  port: 22\n  username: root\nnode:\n  <<: *b\n  port: 2222\n";
        let (root, warnings) = parse(src).unwrap();
        let root = root.unwrap();
        let node = map_get(&root, "node");
        assert_eq!(text(map_get(node, "port")), "2222");
        assert_eq!(text(map_get(node, "username")), "root");
        assert!(warnings.is_empty());
    }

    #[test]
    fn duplicate_keys_warn_and_last_wins() {
        let (root, warnings) = parse("a: 1\nb: 2\na: 3\n").unwrap();
        assert_eq!(text(map_get(&root.unwrap(), "a")), "3");
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].pos.line, 3);
        assert!(
            warnings[0].message.contains("line 1"),
            "{}",
            warnings[0].message
        );
    }

    #[test]
    fn empty_and_comment_only_documents_are_none() {
        assert_eq!(parse("").unwrap().0, None);
        assert_eq!(parse("# nothing\n").unwrap().0, None);
        assert!(parse("~\n").unwrap().0.unwrap().is_null());
    }

    #[test]
    fn quoted_scalars_are_not_plain() {
        let (root, _) = parse("p: \"22\"\nq: 22\n").unwrap();
        let root = root.unwrap();
        assert!(matches!(
            map_get(&root, "p"),
            Node::Scalar { plain: false, .. }
        ));
        assert!(matches!(
            map_get(&root, "q"),
            Node::Scalar { plain: true, .. }
        ));
    }

    #[test]
    fn syntax_errors_have_positions() {
        let err = parse("a:\n  b: 1\n c: 2\n").unwrap_err();
        assert!(err.pos.line >= 3, "{err:?}");
    }

    /// Nine levels of ten aliases each: 10^9 values once expanded.
    pub(crate) fn alias_bomb() -> String {
        let mut src = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let prev = i - 1;
            src.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        src
    }

    #[test]
    fn alias_bombs_are_refused() {
        let err = parse(&alias_bomb()).unwrap_err();
        assert!(err.message.contains("aliases"), "{err:?}");
        assert_eq!(err.kind, SyntaxKind::TooManyValues);
    }
}
