//! A CSV file as nodes: a header row naming the columns, then one node per row. Column
//! names are matched without regard to case, spaces, `_`, `-` and `.`, so `Node Name`,
//! `node_name` and `nodeName` are one column; each column's accepted names are in
//! [`COLUMNS`] (and docs/config.md). `label:KEY` (or `label.KEY`) columns each give one
//! label. The delimiter is the header's most frequent of `,`, `;` and tab (spreadsheets
//! in many locales export `;`).

use super::host::{Field, RawHost, Value};
use crate::config::Diagnostic;
use crate::config::yaml::Pos;

/// Each column, and the names it is accepted under (already normalised: lower case,
/// without spaces, `_`, `-` and `.`).
pub const COLUMNS: &[(&str, &[&str])] = &[
    (
        "name",
        &["name", "nodename", "node", "hostname", "inventoryhostname"],
    ),
    (
        "address",
        &["address", "ip", "ipaddress", "host", "ansiblehost", "sship"],
    ),
    ("port", &["port", "sshport", "ansibleport"]),
    (
        "user",
        &["user", "username", "sshuser", "ansibleuser", "login"],
    ),
    (
        "key_file",
        &[
            "keyfile",
            "key",
            "privatekey",
            "privatekeyfile",
            "privatekeypath",
            "identityfile",
            "sshkey",
            "ansiblesshprivatekeyfile",
        ],
    ),
    ("sudo", &["sudo", "become", "ansiblebecome"]),
    ("arch", &["arch", "architecture"]),
    ("site", &["site", "location"]),
    ("labels", &["labels"]),
];

/// What a header cell names.
fn column(header: &str) -> Option<Field> {
    let trimmed = header.trim();
    for prefix in ["label:", "label."] {
        if let (Some(head), Some(key)) = (trimmed.get(..prefix.len()), trimmed.get(prefix.len()..))
            && head.eq_ignore_ascii_case(prefix)
            && !key.trim().is_empty()
        {
            return Some(Field::Label(key.trim().to_string()));
        }
    }
    let normal: String = trimmed
        .chars()
        .filter(|c| !matches!(c, ' ' | '_' | '-' | '.'))
        .flat_map(char::to_lowercase)
        .collect();
    let (name, _) = COLUMNS
        .iter()
        .find(|(_, names)| names.contains(&normal.as_str()))?;
    Some(match *name {
        "name" => Field::Name,
        "address" => Field::Address,
        "port" => Field::Port,
        "user" => Field::User,
        "key_file" => Field::KeyFile,
        "sudo" => Field::Sudo,
        "arch" => Field::Arch,
        "site" => Field::Site,
        _ => Field::Labels,
    })
}

/// The rows of `text` as hosts, or every problem with the header and the rows' shape.
pub fn hosts(text: &str) -> Result<Vec<RawHost>, Vec<Diagnostic>> {
    let header_line = text.lines().next().unwrap_or("");
    let delimiter = [b',', b';', b'\t']
        .into_iter()
        .max_by_key(|d| header_line.bytes().filter(|b| b == d).count())
        .unwrap_or(b',');
    let mut reader = ::csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .has_headers(false)
        .flexible(true)
        .comment(Some(b'#'))
        .from_reader(text.as_bytes());
    let mut problems = Vec::new();
    // The reader's own line count skips blank and comment lines, so a record's line is
    // counted here from its byte offset: the first line at or after it that holds cells.
    let lines: Vec<&str> = text.split('\n').collect();
    let mut starts = Vec::with_capacity(lines.len());
    let mut offset = 0;
    for line in &lines {
        starts.push(offset);
        offset += line.len() + 1;
    }
    let at = |position: Option<&::csv::Position>| {
        let byte = position.map_or(0, |p| p.byte() as usize);
        let mut line = starts.partition_point(|&start| start <= byte).max(1) - 1;
        while lines
            .get(line)
            .is_some_and(|l| l.trim().is_empty() || l.starts_with('#'))
        {
            line += 1;
        }
        Pos {
            line: line + 1,
            col: 1,
        }
    };
    let mut records = reader.records();
    let header = match records.next() {
        Some(Ok(header)) => header,
        Some(Err(error)) => return Err(vec![csv_problem(&error, at(error.position()))]),
        None => {
            return Err(vec![Diagnostic::error(
                None,
                None,
                "the file is empty".into(),
                Some(header_fix()),
            )]);
        }
    };
    let header_pos = at(header.position());
    let mut fields: Vec<Field> = Vec::new();
    for cell in header.iter() {
        match column(cell) {
            Some(field) if fields.contains(&field) => problems.push(Diagnostic::error(
                Some(header_pos),
                Some("the header".into()),
                format!("the column `{cell}` appears twice"),
                Some("keep one column for each value".into()),
            )),
            Some(field) => fields.push(field),
            None => problems.push(Diagnostic::error(
                Some(header_pos),
                Some("the header".into()),
                format!("the column `{cell}` is not one gen-config knows"),
                Some(header_fix()),
            )),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    if !fields.contains(&Field::Name) {
        return Err(vec![Diagnostic::error(
            Some(header_pos),
            Some("the header".into()),
            "no column holds the nodes' names".into(),
            Some(header_fix()),
        )]);
    }
    let mut hosts = Vec::new();
    for (row, record) in records.enumerate() {
        let record = match record {
            Ok(record) => record,
            Err(error) => {
                problems.push(csv_problem(&error, at(error.position())));
                continue;
            }
        };
        if record.iter().all(|cell| cell.trim().is_empty()) {
            continue;
        }
        let pos = at(record.position());
        let subject = format!("row {}", row + 1);
        if record.len() != fields.len() {
            problems.push(Diagnostic::error(
                Some(pos),
                Some(subject),
                format!(
                    "it has {} cells where the header has {} columns",
                    record.len(),
                    fields.len()
                ),
                Some("give every row one cell per column (empty cells are fine), and quote a cell that holds the delimiter".into()),
            ));
            continue;
        }
        let name = fields
            .iter()
            .position(|f| *f == Field::Name)
            .and_then(|i| record.get(i))
            .unwrap_or("");
        let mut host = RawHost::new(pos, name.trim());
        for (field, cell) in fields.iter().zip(record.iter()) {
            host.set(field.clone(), Value::Text(cell.trim().to_string()), pos);
        }
        hosts.push(host);
    }
    if problems.is_empty() {
        Ok(hosts)
    } else {
        Err(problems)
    }
}

/// The header's fix: every column and its first name.
fn header_fix() -> String {
    let names: Vec<&str> = COLUMNS.iter().map(|(name, _)| *name).collect();
    format!(
        "start the file with a header row naming its columns: {} (or `label:KEY` for one label); `name` is required",
        names.join(", ")
    )
}

/// A row the CSV reader refused (bad UTF-8, a quote left open), at its line.
fn csv_problem(error: &::csv::Error, pos: Pos) -> Diagnostic {
    let (message, fix) = match error.kind() {
        ::csv::ErrorKind::Utf8 { .. } => {
            ("it is not UTF-8 text".to_string(), "save the file as UTF-8")
        }
        _ => (
            format!("it cannot be read as CSV ({error})"),
            "close every quoted cell with a quote, and double a quote inside one",
        ),
    };
    Diagnostic::error(
        Some(pos),
        Some("this row".into()),
        message,
        Some(fix.into()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_matched_by_their_aliases() {
        assert_eq!(column("Node Name"), Some(Field::Name));
        assert_eq!(column("ansible_host"), Some(Field::Address));
        assert_eq!(column("SSH-Port"), Some(Field::Port));
        assert_eq!(column("privateKeyPath"), Some(Field::KeyFile));
        assert_eq!(column("label:zone"), Some(Field::Label("zone".into())));
        assert_eq!(
            column("Label.example.com/tier"),
            Some(Field::Label("example.com/tier".into()))
        );
        assert_eq!(column("colour"), None);
    }

    #[test]
    fn rows_keep_their_lines_and_semicolons_delimit_when_the_header_says_so() {
        let text = "name;ip;labels\nweb01;10.0.0.1;\"zone=eu;tier=edge\"\n\n# a comment\nweb02;10.0.0.2;\n";
        let hosts = hosts(text).unwrap();
        assert_eq!(hosts.len(), 2);
        assert_eq!(hosts[0].pos.line, 2);
        assert_eq!(hosts[1].pos.line, 5);
        assert_eq!(hosts[1].source_name, "web02");
    }

    #[test]
    fn a_short_row_and_an_unknown_column_are_errors_at_their_lines() {
        let problems = hosts("name,address\nweb01\n").unwrap_err();
        assert_eq!(
            problems[0].render(std::path::Path::new("h.csv")),
            "h.csv:2:1: row 1: it has 1 cells where the header has 2 columns; give every row one cell per column (empty cells are fine), and quote a cell that holds the delimiter."
        );
        let problems = hosts("name,colour\n").unwrap_err();
        assert!(
            problems[0]
                .render(std::path::Path::new("h.csv"))
                .starts_with("h.csv:1:1: the header: the column `colour` is not one gen-config knows; start the file with a header row naming its columns: name, address,"),
            "{problems:?}"
        );
    }
}
