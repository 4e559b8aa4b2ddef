//! keadmCmd templates: Go's `text/template` (gotmpl) with `cmdTplArgs` as the data, as in
//! keadm, plus `missingkey=error` (keadm writes `<no value>`), `{{key}}` (keadm's proposal
//! writes it; Go has no such function) and `{{env "NAME"}}` (a secret). tests/template_go.rs
//! checks the output against Go's own text/template.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use gotmpl::parse::{Node, Parser};
use gotmpl::{MissingKey, Template, TemplateError as GoError, ToValue, Value};

use crate::redact::Secret;

/// A rendered command and the secret values that went into it (from `env`).
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub text: String,
    pub secrets: Vec<Secret>,
}

/// Why a template cannot be rendered, and the fix where there is one obvious thing to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    pub message: String,
    pub fix: Option<String>,
}

/// Where values come from: `cmdTplArgs`, and the environment for `env`.
pub trait Lookup {
    fn args(&self) -> &BTreeMap<String, String>;
    fn env(&self, name: &str) -> Option<String>;
}

/// Go's predefined functions: a key with one of these names is reached as `{{.key}}` only.
const GO_FUNCTIONS: &str =
    "and call html index slice js len not or print printf println urlquery eq ge gt le lt ne";
/// gotmpl 0.6 runs a block without `{{end}}` to the end of the text and stops at a stray
/// `{{end}}` or `{{else}}`; Go refuses both. A well-formed template keeps this text last.
const END: &str = "\u{1}end of keadmCmd";
const UNCLOSED: &str = "an `{{if}}`, `{{range}}`, `{{with}}`, `{{define}}` or `{{block}}` lacks its `{{end}}`, or an `{{end}}` or `{{else}}` closes nothing";

/// gotmpl's functions are `'static`, so `env` cannot hold the lookup: it answers a name it
/// does not know with "", and `render` looks the name up and runs again until none is new.
#[derive(Default)]
struct Env {
    known: BTreeMap<String, Option<String>>,
    asked: BTreeSet<String>,
}

/// Renders `template` with `cmdTplArgs` and the environment from `lookup`.
pub fn render(template: &str, lookup: &dyn Lookup) -> Result<Rendered, TemplateError> {
    let env = Arc::new(Mutex::new(Env::default()));
    let parsed = with_functions(lookup.args(), Arc::clone(&env))
        .parse(template)
        .map_err(|e| explain(e, None))?;
    let checked = Parser::new(&format!("{template}{END}"), "{{", "}}").and_then(Parser::parse);
    if !matches!(checked, Ok((l, _)) if matches!(l.nodes.last(), Some(Node::Text(t)) if t.text.ends_with(END)))
    {
        return Err(refused(UNCLOSED));
    }
    for _ in 0..16 {
        let result = parsed.execute_to_string(&lookup.args().to_value());
        let mut env = env.lock().unwrap_or_else(PoisonError::into_inner);
        let asked = std::mem::take(&mut env.asked);
        let known = &env.known;
        let new: Vec<&String> = asked.iter().filter(|n| !known.contains_key(*n)).collect();
        if new.is_empty() {
            let value = |name: &String| env.known.get(name).cloned().flatten();
            let unset = asked.iter().find(|n| value(n).is_none()).cloned();
            let secrets = asked.iter().filter_map(value).map(Secret::new).collect();
            return result
                .map(|text| Rendered { text, secrets })
                .map_err(|e| explain(e, unset));
        }
        env.known
            .extend(new.into_iter().map(|n| (n.clone(), lookup.env(n))));
    }
    Err(refused("`env` names made of `env` values nest too deep"))
}

fn refused(why: impl std::fmt::Display) -> TemplateError {
    let message = format!("Go's text/template refuses it: {why}");
    TemplateError { message, fix: None }
}

/// A template with `env`, Go's `index` on a `map[string]string`, and a function per key.
fn with_functions(args: &BTreeMap<String, String>, env: Arc<Mutex<Env>>) -> Template {
    let mut t = Template::new("keadmCmd").missing_key(MissingKey::Error);
    t = t.func("env", move |a| {
        let [Value::String(name)] = a else {
            return Err(GoError::Exec("env takes one quoted variable name".into()));
        };
        let mut env = env.lock().unwrap_or_else(PoisonError::into_inner);
        env.asked.insert(name.to_string());
        match env.known.get(name.as_ref()) {
            Some(Some(value)) => Ok(value.to_value()),
            Some(None) => Err(GoError::Exec(format!("{name} is not set"))),
            None => Ok("".to_value()),
        }
    });
    // gotmpl's `index` yields nil (`<no value>`) for a missing key, Go's on keadm's
    // map[string]string yields "": the way to test for a key that may be absent.
    t = t.func("index", |a| match a.split_first() {
        Some((item, keys)) => keys
            .iter()
            .try_fold(item.clone(), |item, k| match (&item, k) {
                (Value::Map(m), Value::String(s)) if !m.contains_key(s) => Ok("".to_value()),
                _ => item.index(k),
            }),
        None => Err(GoError::Exec("index of nothing".into())),
    });
    // A key that is no identifier (`cloud-ip`) cannot be named in a template: harmless.
    for (key, value) in args {
        if key != "env" && !GO_FUNCTIONS.split(' ').any(|f| f == key) {
            let (value, name) = (value.to_value(), key.clone());
            t = t.func(key, move |a| match a {
                [] => Ok(value.clone()),
                _ => Err(GoError::Exec(format!("{{{{{name}}}}} takes no arguments"))),
            });
        }
    }
    t
}

/// Turns gotmpl's error into one for the operator, with the fix for the usual causes.
/// Go's own text (`template: keadmCmd:LINE:COLUMN: ...`) says where, as keadm would.
fn explain(err: GoError, unset_env: Option<String>) -> TemplateError {
    let (message, fix) = match (err, unset_env) {
        (_, Some(n)) => (
            format!("`env \"{n}\"` reads the environment variable {n}, which is not set"),
            Some(format!("export {n}=... before running keadm-batch")),
        ),
        (GoError::MissingKey { key: k }, _) => (
            format!("`{k}` is not defined in keadm.cmdTplArgs (keadm would write `<no value>`)"),
            Some(format!(
                "define `{k}` under keadm.cmdTplArgs or correct the name; test a key that may be absent with {{{{if index . \"{k}\"}}}}"
            )),
        ),
        (GoError::UndefinedFunction(n), _) => (
            format!("`{n}` is neither a key of keadm.cmdTplArgs nor a template function"),
            Some(format!(
                "define `{n}` under keadm.cmdTplArgs or correct the name"
            )),
        ),
        (other, _) => (refused(other).message, None),
    };
    TemplateError { message, fix }
}
