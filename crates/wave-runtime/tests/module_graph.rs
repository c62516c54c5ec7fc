//! No import cycles between the modules of wave's crates: the check `cargo modules dependencies
//! --acyclic` (the `cargo-modules` crate) makes, done here so that `make test` needs no extra tool.
//!
//! ```text
//! src/**/*.rs ─► one module per file (tests left out) ─► comments, strings and test modules removed
//!   ─► every path it names: `crate::…`, `super::…`, `self::…`, a child module's name, `use` trees
//!   ─► an edge to the deepest module the path names (an item of a parent is the parent)
//!   ─► strongly connected components: any with two or more modules is a cycle, printed
//! ```
//!
//! A child that uses an item of its parent while the parent uses the child is a cycle too: the state
//! both need belongs below both.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The modules of a crate, each with the modules its code names.
struct Graph {
    edges: BTreeMap<String, BTreeSet<String>>,
}

impl Graph {
    /// Reads the crate whose `src` is `src`.
    fn read(src: &Path) -> Graph {
        let mut files = Vec::new();
        walk(src, &mut files);
        let mut sources = BTreeMap::new();
        for file in files {
            let module = module_of(src, &file);
            let text =
                std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
            sources.insert(module, code_only(&text));
        }
        // Test files (`tests.rs`, `*_tests.rs`, by the crates' convention) are not part of the graph.
        let modules: BTreeSet<String> = sources
            .keys()
            .filter(|m| {
                let last = m.rsplit("::").next().unwrap_or_default();
                last != "tests" && !last.ends_with("_tests")
            })
            .cloned()
            .collect();
        let mut edges = BTreeMap::new();
        for module in &modules {
            let code = strip_test_modules(&sources[module]);
            let children: BTreeSet<String> = modules
                .iter()
                .filter_map(|m| m.strip_prefix(&format!("{module}::")))
                .filter(|rest| !rest.contains("::"))
                .map(str::to_string)
                .collect();
            let mut uses = BTreeSet::new();
            for path in paths(&code) {
                if let Some(target) = resolve(module, &path, &children, &modules)
                    && target != *module
                {
                    uses.insert(target);
                }
            }
            edges.insert(module.clone(), uses);
        }
        Graph { edges }
    }

    /// The cycles: for each strongly connected component of two or more modules, a path round it
    /// through each of its edges (each path as short as may be), so every import to undo is shown.
    fn cycles(&self) -> Vec<Vec<String>> {
        let mut cycles = Vec::new();
        for component in self.components().into_iter().filter(|c| c.len() > 1) {
            let inside: BTreeSet<&str> = component.iter().map(String::as_str).collect();
            let mut shown: BTreeSet<(String, String)> = BTreeSet::new();
            for from in &component {
                for to in self.edges[from].iter().filter(|t| inside.contains(t.as_str())) {
                    if shown.contains(&(from.clone(), to.clone())) {
                        continue;
                    }
                    let mut cycle = vec![from.clone()];
                    cycle.extend(self.path(to, from, &inside));
                    for pair in cycle.windows(2) {
                        shown.insert((pair[0].clone(), pair[1].clone()));
                    }
                    cycles.push(cycle);
                }
            }
        }
        cycles
    }

    /// Tarjan's strongly connected components.
    fn components(&self) -> Vec<Vec<String>> {
        struct State<'a> {
            graph: &'a Graph,
            index: BTreeMap<&'a str, usize>,
            low: BTreeMap<&'a str, usize>,
            stack: Vec<&'a str>,
            on_stack: BTreeSet<&'a str>,
            out: Vec<Vec<String>>,
        }
        fn visit<'a>(s: &mut State<'a>, v: &'a str) {
            let i = s.index.len();
            s.index.insert(v, i);
            s.low.insert(v, i);
            s.stack.push(v);
            s.on_stack.insert(v);
            for w in s.graph.edges.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let low = s.low[v].min(s.low[w]);
                    s.low.insert(v, low);
                } else if s.on_stack.contains(w) {
                    let low = s.low[v].min(s.index[w]);
                    s.low.insert(v, low);
                }
            }
            if s.low[v] == s.index[v] {
                let mut component = Vec::new();
                while let Some(w) = s.stack.pop() {
                    s.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                component.sort();
                s.out.push(component);
            }
        }
        let mut s = State {
            graph: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            out: Vec::new(),
        };
        for v in self.edges.keys() {
            if !s.index.contains_key(v.as_str()) {
                visit(&mut s, v);
            }
        }
        s.out
    }

    /// A shortest path from `from` to `to` inside `inside` (both ends included).
    fn path(&self, from: &str, to: &str, inside: &BTreeSet<&str>) -> Vec<String> {
        let mut previous: BTreeMap<&str, &str> = BTreeMap::new();
        let mut frontier = vec![from];
        let mut seen: BTreeSet<&str> = BTreeSet::from([from]);
        while !frontier.is_empty() && !seen.contains(to) {
            let mut next = Vec::new();
            for v in frontier {
                for w in self.edges.get(v).into_iter().flatten().map(String::as_str) {
                    if inside.contains(w) && seen.insert(w) {
                        previous.insert(w, v);
                        next.push(w);
                    }
                }
            }
            frontier = next;
        }
        let mut path = vec![to.to_string()];
        let mut at = to;
        while at != from {
            at = previous[at];
            path.push(at.to_string());
        }
        path.reverse();
        path
    }
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// `src/lib.rs` is `crate`, `src/a/mod.rs` and `src/a.rs` are `crate::a`, `src/a/b.rs` is `crate::a::b`.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("a file under src");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "lib" | "main" | "mod") {
        parts.push(stem.to_string());
    }
    std::iter::once("crate".to_string())
        .chain(parts)
        .collect::<Vec<_>>()
        .join("::")
}

/// The code of a file without comments, string and char literals (so that prose and messages that
/// name a path are not taken for uses).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !is_ident(chars.get(i.wrapping_sub(1)))
        {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && (chars.get(i + 2) == Some(&'\'') || next == Some('\\')) {
            // A char literal ('x', '\n', '\u{…}'); a lifetime has no closing quote.
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

fn skip_attributes(mut s: &str) -> &str {
    loop {
        s = s.trim_start();
        if s.starts_with("#[") {
            match s.find(']') {
                Some(end) => s = &s[end + 1..],
                None => return s,
            }
        } else if let Some(rest) = s.strip_prefix("pub ") {
            s = rest;
        } else {
            return s;
        }
    }
}

/// `code` without its inline `#[cfg(test)] mod … { … }` blocks.
fn strip_test_modules(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let declaration = skip_attributes(after);
        if declaration.starts_with("mod ")
            && let Some(open) = declaration.find(['{', ';'])
            && declaration.as_bytes()[open] == b'{'
        {
            let body = &declaration[open..];
            let mut depth = 0usize;
            let mut end = body.len();
            for (i, c) in body.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            rest = &body[end..];
        } else {
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Every path in `code`: each `use` tree expanded, and every `a::b::c` outside them.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let tokens = tokenize(code);
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i] == "use" {
            let end = tokens[i..]
                .iter()
                .position(|t| t == ";")
                .map_or(tokens.len(), |p| i + p);
            use_tree(&tokens[i + 1..end], &mut Vec::new(), &mut out);
            i = end + 1;
            continue;
        }
        if is_ident(tokens[i].chars().next().as_ref()) && tokens.get(i + 1).is_some_and(|t| t == "::") {
            let mut path = vec![tokens[i].clone()];
            let mut j = i + 1;
            while tokens.get(j).is_some_and(|t| t == "::")
                && tokens
                    .get(j + 1)
                    .is_some_and(|t| is_ident(t.chars().next().as_ref()))
            {
                path.push(tokens[j + 1].clone());
                j += 2;
            }
            // Only the start of a path: `a::b` inside `x::a::b` is not a path of its own.
            let preceded = i > 0 && tokens[i - 1] == "::";
            if !preceded {
                out.push(path);
            }
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

fn tokenize(code: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if is_ident(Some(&c)) {
            let start = i;
            while i < chars.len() && is_ident(chars.get(i)) {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push("::".into());
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else {
            tokens.push(c.to_string());
            i += 1;
        }
    }
    tokens
}

/// Expands one `use` tree (`a::{b, c::{d, self}}`, `a as b`, `a::*`) into its paths.
fn use_tree(tokens: &[String], prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut i = 0;
    let depth = prefix.len();
    while i < tokens.len() {
        let t = tokens[i].as_str();
        match t {
            "{" => {
                let mut level = 0;
                let mut start = i + 1;
                let mut j = i;
                while j < tokens.len() {
                    match tokens[j].as_str() {
                        "{" => level += 1,
                        "}" => {
                            level -= 1;
                            if level == 0 {
                                use_tree(&tokens[start..j], &mut prefix.clone(), out);
                                break;
                            }
                        }
                        "," if level == 1 => {
                            use_tree(&tokens[start..j], &mut prefix.clone(), out);
                            start = j + 1;
                        }
                        _ => {}
                    }
                    j += 1;
                }
                return;
            }
            "::" => {}
            "as" => {
                i += 1;
            }
            "*" => {}
            "self" if prefix.len() > depth || !prefix.is_empty() => {}
            _ if is_ident(t.chars().next().as_ref()) => prefix.push(t.to_string()),
            _ => {}
        }
        i += 1;
    }
    if !prefix.is_empty() {
        out.push(prefix.clone());
    }
}

/// The module `path`, named in `module`, points into: the deepest module it names. `None` for a path
/// into another crate or a local item.
fn resolve(
    module: &str,
    path: &[String],
    children: &BTreeSet<String>,
    modules: &BTreeSet<String>,
) -> Option<String> {
    let mut at: Vec<&str> = module.split("::").collect();
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            at = vec!["crate"];
            rest = &path[1..];
        }
        Some("super") | Some("self") => {
            while let Some(first) = rest.first() {
                match first.as_str() {
                    "super" => {
                        at.pop();
                        rest = &rest[1..];
                    }
                    "self" => rest = &rest[1..],
                    _ => break,
                }
            }
            if at.is_empty() {
                return None;
            }
        }
        Some(name) if children.contains(name) => {}
        _ => return None,
    }
    let mut target = at.join("::");
    for segment in rest {
        let deeper = format!("{target}::{segment}");
        if modules.contains(&deeper) {
            target = deeper;
        } else {
            break;
        }
    }
    Some(target)
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

fn assert_acyclic(name: &str) {
    let graph = Graph::read(&crate_src(name));
    assert!(
        graph.edges.len() > 5,
        "{name}: found only {} modules",
        graph.edges.len()
    );
    let cycles = graph.cycles();
    assert!(
        cycles.is_empty(),
        "{name} has {} import cycle(s); move what both sides need below both:\n{}",
        cycles.len(),
        cycles
            .iter()
            .map(|c| format!("  {}", c.join(" -> ")))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_runtime_has_no_import_cycle() {
    assert_acyclic("wave-runtime");
}

#[test]
fn the_check_finds_a_cycle_through_a_parent_and_a_child_and_ignores_prose_and_tests() {
    let dir = std::env::temp_dir().join(format!("wave-module-graph-{}", std::process::id()));
    let write = |path: &str, text: &str| {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    };
    write("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n");
    write(
        "a/mod.rs",
        "mod inner;\npub fn shared() {}\npub fn go() { inner::run() }\n",
    );
    write("a/inner.rs", "use super::shared;\npub fn run() { shared() }\n");
    write(
        "b.rs",
        "// crate::c is named only here\nconst S: &str = \"crate::c::x\";\n#[cfg(test)]\nmod tests { use crate::c; }\n",
    );
    write(
        "c.rs",
        "use crate::{b, a::{self}};\n#[cfg(test)]\n#[path = \"c_tests.rs\"]\nmod tests;\n",
    );
    write("c_tests.rs", "use crate::c;\n");
    let graph = Graph::read(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        graph.edges["crate::b"],
        BTreeSet::new(),
        "prose, strings and tests name no module"
    );
    assert_eq!(
        graph.edges["crate::c"],
        ["crate::a", "crate::b"].map(String::from).into(),
        "a nested use tree names both"
    );
    assert!(
        !graph.edges.contains_key("crate::c_tests"),
        "a test file is not a module of the graph"
    );
    assert_eq!(
        graph.cycles(),
        vec![vec!["crate::a", "crate::a::inner", "crate::a"]]
    );
}
