//! The subset of Go's text/template that keadm users write in `keadmCmd`.
//!
//! keadm renders `keadmCmd` with Go's `text/template` against `cmdTplArgs`. We render the
//! forms people use: `{{.key}}`, `{{ .key }}`, trim markers `{{- .key -}}`,
//! `{{index . "a-b"}}`, comments `{{/* ... */}}`, and as extensions `{{key}}` (the form
//! keadm's proposal documents) and `{{env "NAME"}}`. Unlike Go, a missing key is an error
//! rather than `<no value>`, which keadm would paste into a shell command. Anything else
//! (pipelines, `if`, `range`, `printf`...) is refused by name instead of half-emulated.
//! tinytemplate cannot be used here: it reads `{{` as its own block syntax and every `{`
//! in shell text (`${HOME}`, `awk '{print}'`) as a placeholder.

use std::collections::BTreeMap;

use crate::redact::Secret;

/// A rendered command and the secret values that went into it (from `env`).
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub text: String,
    pub secrets: Vec<Secret>,
}

/// Why a template could not be rendered. `offset` is the byte offset of the action in the
/// template, for pointing at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    pub offset: usize,
    pub message: String,
    /// What to do about it, where there is one obvious thing.
    pub fix: Option<String>,
}

impl std::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Where values come from: `cmdTplArgs`, and the process environment for `env`.
pub trait Lookup {
    fn arg(&self, key: &str) -> Option<&str>;
    fn env(&self, name: &str) -> Option<String>;
}

/// The real lookup: a `cmdTplArgs` map and `std::env`.
pub struct Args<'a>(pub &'a BTreeMap<String, String>);

impl Lookup for Args<'_> {
    fn arg(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

/// Renders `template` with values from `lookup`; the first unsupported construct, missing
/// key or unset variable is an error.
pub fn render(template: &str, lookup: &dyn Lookup) -> Result<Rendered, TemplateError> {
    let mut out = String::with_capacity(template.len());
    let mut secrets = Vec::new();
    let mut rest = template;
    let mut offset = 0;
    while let Some(start) = rest.find("{{") {
        let mut text = &rest[..start];
        let after_open = &rest[start + 2..];
        // `{{- ` trims white space before the action. Go requires the space: `{{-3}}` is -3.
        let trim_left = after_open.starts_with("- ")
            || after_open.starts_with("-\t")
            || after_open.starts_with("-\n")
            || after_open.starts_with("-\r");
        if trim_left {
            text = text.trim_end_matches([' ', '\t', '\n', '\r']);
        }
        out.push_str(text);
        let body_start = if trim_left { 3 } else { 2 };
        let action_offset = offset + start;
        let (body, trim_right, consumed) =
            split_action(&rest[start + body_start..]).ok_or_else(|| TemplateError {
                offset: action_offset,
                message: format!(
                    "the action at column {} is never closed with `}}}}`",
                    column(template, action_offset)
                ),
                fix: Some("close it with `}}`".into()),
            })?;
        let action = Action::parse(body).map_err(|message| TemplateError {
            offset: action_offset,
            message,
            fix: None,
        })?;
        match action {
            Action::Comment => {}
            Action::Key(key) => match lookup.arg(&key) {
                Some(value) => out.push_str(value),
                None => {
                    return Err(TemplateError {
                        offset: action_offset,
                        message: format!(
                            "`{}` refers to `{key}`, which keadm.cmdTplArgs does not define (keadm would silently write `<no value>`)",
                            body.trim()
                        ),
                        fix: Some(format!(
                            "define `{key}` under keadm.cmdTplArgs, or correct the placeholder"
                        )),
                    });
                }
            },
            Action::Env(name) => match lookup.env(&name) {
                Some(value) => {
                    out.push_str(&value);
                    secrets.push(Secret::new(value));
                }
                None => {
                    return Err(TemplateError {
                        offset: action_offset,
                        message: format!(
                            "`{}` reads the environment variable {name}, which is not set",
                            body.trim()
                        ),
                        fix: Some(format!("export {name}=... before running keadm-batch")),
                    });
                }
            },
        }
        let mut remainder = &rest[start + body_start + consumed..];
        if trim_right {
            remainder = remainder.trim_start_matches([' ', '\t', '\n', '\r']);
        }
        offset = template.len() - remainder.len();
        rest = remainder;
    }
    out.push_str(rest);
    Ok(Rendered { text: out, secrets })
}

fn column(template: &str, offset: usize) -> usize {
    template[..offset].chars().count() + 1
}

/// Finds the end of an action. Returns the body (without trim markers), whether it ends
/// with ` -}}`, and how many bytes of `s` the body and the closing braces take.
/// Quoted strings may contain `}}`.
fn split_action(s: &str) -> Option<(&str, bool, usize)> {
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut quote: Option<u8> = None;
    // A comment runs to `*/` whatever it contains.
    let trimmed = s.trim_start();
    if trimmed.starts_with("/*") {
        let comment_start = s.len() - trimmed.len();
        let end = s[comment_start..].find("*/")? + comment_start + 2;
        i = end;
    }
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(q) => {
                if b == b'\\' && q == b'"' {
                    i += 1;
                } else if b == q {
                    quote = None;
                }
            }
            None => {
                if b == b'"' || b == b'`' || b == b'\'' {
                    quote = Some(b);
                // Byte comparisons: `i` may be inside a multi-byte character, where
                // slicing `s` would panic (found by fuzzing: `{{ awk ل`).
                } else if bytes[i..].starts_with(b" -}}")
                    || bytes[i..].starts_with(b"\t-}}")
                    || bytes[i..].starts_with(b"\n-}}")
                {
                    return Some((&s[..i], true, i + 4));
                } else if bytes[i..].starts_with(b"}}") {
                    return Some((&s[..i], false, i + 2));
                }
            }
        }
        i += 1;
    }
    None
}

#[derive(Debug, PartialEq)]
enum Action {
    Comment,
    Key(String),
    Env(String),
}

impl Action {
    fn parse(body: &str) -> Result<Action, String> {
        let trimmed = body.trim();
        if let Some(comment) = trimmed.strip_prefix("/*") {
            return if comment.ends_with("*/") {
                Ok(Action::Comment)
            } else {
                Err("a comment `{{/* ... */}}` must end with `*/` right before `}}`".into())
            };
        }
        let words = tokenize(trimmed)?;
        let shown = format!("{{{{{trimmed}}}}}");
        match words.as_slice() {
            [] => Err("an empty action `{{}}` is not valid in Go templates".into()),
            [Word::Field(key)] => Ok(Action::Key(key.clone())),
            // `{{key}}` is how keadm's proposal writes placeholders; Go rejects it, we accept it.
            [Word::Ident(key)] if !is_builtin(key) => Ok(Action::Key(key.clone())),
            [Word::Ident(f), Word::Dot, Word::Str(key)] if f == "index" => {
                Ok(Action::Key(key.clone()))
            }
            [Word::Ident(f), Word::Str(name)] if f == "env" => Ok(Action::Env(name.clone())),
            [Word::Ident(f), ..] if f == "env" => Err(format!(
                "`{shown}` is not supported: write `{{{{env \"NAME\"}}}}` with one quoted variable name"
            )),
            [Word::Ident(f), ..] if f == "index" => Err(format!(
                "`{shown}` is not supported: write `{{{{index . \"key\"}}}}`"
            )),
            _ if words.contains(&Word::Pipe) => Err(format!(
                "`{shown}` uses a pipeline (`|`), which keadm-batch does not support; write the value into keadm.cmdTplArgs instead"
            )),
            [Word::Ident(f), ..] => Err(format!(
                "`{shown}` uses `{f}`, which keadm-batch does not support in keadmCmd (supported: {{{{.key}}}}, {{{{index . \"key\"}}}}, {{{{env \"NAME\"}}}}, comments)"
            )),
            [Word::Dot] => Err(format!(
                "`{shown}` would print all of cmdTplArgs; name a key, as in {{{{.token}}}}"
            )),
            _ => Err(format!(
                "`{shown}` is not supported in keadmCmd (supported: {{{{.key}}}}, {{{{index . \"key\"}}}}, {{{{env \"NAME\"}}}}, comments)"
            )),
        }
    }
}

fn is_builtin(word: &str) -> bool {
    matches!(
        word,
        "if" | "else"
            | "end"
            | "range"
            | "with"
            | "define"
            | "template"
            | "block"
            | "break"
            | "continue"
            | "and"
            | "or"
            | "not"
            | "len"
            | "index"
            | "slice"
            | "print"
            | "printf"
            | "println"
            | "html"
            | "js"
            | "urlquery"
            | "eq"
            | "ne"
            | "lt"
            | "le"
            | "gt"
            | "ge"
            | "call"
            | "env"
            | "nil"
            | "true"
            | "false"
    )
}

#[derive(Debug, PartialEq)]
enum Word {
    Dot,
    Field(String),
    Ident(String),
    Str(String),
    Pipe,
    Other(String),
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn tokenize(s: &str) -> Result<Vec<Word>, String> {
    let mut words = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '|' {
            words.push(Word::Pipe);
            i += 1;
        } else if c == '.' {
            let start = i + 1;
            let mut j = start;
            while j < chars.len() && is_ident_char(chars[j]) {
                j += 1;
            }
            if j == start {
                words.push(Word::Dot);
                i += 1;
            } else if j < chars.len() && chars[j] == '.' {
                let chain: String = chars[i..]
                    .iter()
                    .take_while(|c| !c.is_whitespace())
                    .collect();
                return Err(format!(
                    "`{chain}` looks inside a value; cmdTplArgs values are plain text, so use {{{{.key}}}}"
                ));
            } else {
                words.push(Word::Field(chars[start..j].iter().collect()));
                i = j;
            }
        } else if c == '"' {
            let mut value = String::new();
            let mut j = i + 1;
            loop {
                match chars.get(j) {
                    None => return Err("a quoted string in the action is never closed".into()),
                    Some('"') => break,
                    Some('\\') => {
                        let escaped = chars
                            .get(j + 1)
                            .ok_or("a quoted string ends with a lone `\\`")?;
                        value.push(match escaped {
                            'n' => '\n',
                            't' => '\t',
                            other => *other,
                        });
                        j += 2;
                    }
                    Some(other) => {
                        value.push(*other);
                        j += 1;
                    }
                }
            }
            words.push(Word::Str(value));
            i = j + 1;
        } else if c == '`' {
            let end = chars[i + 1..]
                .iter()
                .position(|c| *c == '`')
                .ok_or("a raw string in the action is never closed")?;
            words.push(Word::Str(chars[i + 1..i + 1 + end].iter().collect()));
            i = i + end + 2;
        } else if is_ident_char(c) && !c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (is_ident_char(chars[i]) || chars[i] == '-') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            words.push(Word::Ident(word));
        } else {
            let start = i;
            while i < chars.len() && !chars[i].is_whitespace() {
                i += 1;
            }
            words.push(Word::Other(chars[start..i].iter().collect()));
        }
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake(BTreeMap<String, String>, BTreeMap<String, String>);
    impl Lookup for Fake {
        fn arg(&self, key: &str) -> Option<&str> {
            self.0.get(key).map(String::as_str)
        }
        fn env(&self, name: &str) -> Option<String> {
            self.1.get(name).cloned()
        }
    }

    fn fake() -> Fake {
        let args = [
            ("cmd", "join"),
            ("token", "abc.def"),
            ("cloud-ip", "1.2.3.4:10000"),
            ("empty", ""),
        ];
        let env = [("TOKEN", "s3cret")];
        Fake(
            args.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            env.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn ok(t: &str) -> String {
        render(t, &fake()).unwrap().text
    }

    fn err(t: &str) -> String {
        render(t, &fake()).unwrap_err().message
    }

    #[test]
    fn non_ascii_inside_an_action_is_an_error_not_a_panic() {
        // Found by fuzz/fuzz_targets/template_render.rs and config_load.rs.
        assert!(err("reset [{{ awk \u{644}").contains("never closed"));
        assert!(render("{{\u{5dc}md}} x", &fake()).is_err());
        assert_eq!(ok("{{ .cmd }} \u{644}{{/* \u{5dc} */}}"), "join \u{644}");
    }

    // Expected values are what Go's text/template prints for the same template and map.
    #[test]
    fn go_forms() {
        assert_eq!(ok("{{.cmd}} --token={{.token}}"), "join --token=abc.def");
        assert_eq!(ok("{{ .cmd }} x"), "join x");
        assert_eq!(ok("a  {{- .cmd -}}  b"), "ajoinb");
        assert_eq!(ok("a \n {{- .cmd}} b"), "ajoin b");
        assert_eq!(ok("{{index . \"cloud-ip\"}}"), "1.2.3.4:10000");
        assert_eq!(ok("{{ index . `cloud-ip` }}"), "1.2.3.4:10000");
        assert_eq!(ok("x{{/* a comment */}}y"), "xy");
        assert_eq!(ok("x {{- /* trimmed */ -}} y"), "xy");
        assert_eq!(ok("[{{.empty}}]"), "[]");
        assert_eq!(ok("plain text, no actions"), "plain text, no actions");
    }

    #[test]
    fn shell_braces_pass_through() {
        assert_eq!(
            ok("awk '{print $1}' ${HOME} }}"),
            "awk '{print $1}' ${HOME} }}"
        );
    }

    #[test]
    fn extensions() {
        assert_eq!(ok("{{cmd}} {{ token }}"), "join abc.def");
        let r = render("--token={{env \"TOKEN\"}}", &fake()).unwrap();
        assert_eq!(r.text, "--token=s3cret");
        assert_eq!(r.secrets, vec![Secret::new("s3cret")]);
    }

    #[test]
    fn errors_name_the_construct() {
        assert!(err("{{.missing}}").contains("`missing`"));
        assert!(err("{{.missing}}").contains("<no value>"));
        assert!(err("{{env \"UNSET_X\"}}").contains("UNSET_X"));
        assert!(err("{{.cmd | printf \"%q\"}}").contains("pipeline"));
        assert!(err("{{if .cmd}}x{{end}}").contains("`if`"));
        assert!(err("{{printf \"%s\" .cmd}}").contains("`printf`"));
        assert!(err("{{.}}").contains("all of cmdTplArgs"));
        assert!(err("{{.a.b}}").contains("plain text"));
        assert!(err("join {{.cmd").contains("never closed"));
        assert!(err("join {{.cmd").contains("column 6"));
    }
}
