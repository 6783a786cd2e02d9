//! The rules of the code's layout, read from `src/` as a reader would:
//! no two files import each other, however far round (a circle means two
//! files that can only be understood, or changed, together), and the
//! layering `lib.rs` states holds, and no file is over 800 lines. A
//! module's own file reaching into its submodules is the tree, not an
//! import; a name a module re-exports (`pub use self::child::Name`)
//! counts as the file that defines it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use std::sync::LazyLock;

use regex::Regex;

/// A module path (`["run", "isolation", "open"]`), the crate's root empty.
type Module = Vec<String>;

/// Every module of `src/` with a file of its own, and that file.
fn modules() -> BTreeMap<Module, PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = BTreeMap::new();
    for entry in walkdir::WalkDir::new(&src) {
        let path = entry.unwrap().into_path();
        if path.extension().is_none_or(|ext| ext != "rs") {
            continue;
        }
        let relative = path.strip_prefix(&src).unwrap().with_extension("");
        let mut module: Module = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
            module.pop();
        }
        found.insert(module, path);
    }
    found
}

/// The code of a file, without its line comments and its test module.
fn code(path: &Path) -> String {
    static COMMENT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"//[^\n]*").unwrap());
    static TESTS: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"#\[cfg\(test\)\]\s*mod tests").unwrap());
    let text = std::fs::read_to_string(path).unwrap();
    let text = COMMENT.replace_all(&text, "").into_owned();
    match TESTS.find(&text) {
        Some(at) => text[..at.start()].to_string(),
        None => text,
    }
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let Some(open) = tree.find('{') else {
        return tree
            .split(',')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
    };
    // Not a path (a `use` in a string): what comes before is all it names.
    let Some(close) = tree.rfind('}').filter(|close| *close > open) else {
        return vec![tree[..open].to_string()];
    };
    let (prefix, inner) = (&tree[..open], &tree[open + 1..close]);
    let mut parts = Vec::new();
    let (mut depth, mut part) = (0, String::new());
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut part));
                continue;
            }
            _ => {}
        }
        part.push(c);
    }
    parts.push(part);
    parts
        .iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand(p))
        .map(|p| format!("{prefix}{p}"))
        .collect()
}

/// Every path a file's code names from `crate`, `super` or `self`.
fn paths(code: &str) -> BTreeSet<String> {
    static USES: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\buse\s+([^;]+);").unwrap());
    static INLINE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\b(?:crate|super|self)(?:::\w+)+").unwrap());
    let mut found = BTreeSet::new();
    for used in USES.captures_iter(code) {
        let tree: String = used[1].chars().filter(|c| !c.is_whitespace()).collect();
        for path in expand(&tree) {
            found.insert(path.split(" as ").next().unwrap_or_default().to_string());
        }
    }
    found.extend(INLINE.find_iter(code).map(|m| m.as_str().to_string()));
    found
}

/// `path`, named in `module`, as a module path from the root.
fn absolute(module: &Module, path: &str) -> Option<Module> {
    let mut parts = path.split("::").filter(|p| !p.is_empty()).peekable();
    let mut at = match parts.peek().copied() {
        Some("crate") => {
            parts.next();
            Vec::new()
        }
        Some("super" | "self") => module.clone(),
        _ => return None,
    };
    while let Some(step) = parts.peek().copied() {
        match step {
            "super" => at.pop(),
            "self" => None,
            _ => break,
        };
        parts.next();
    }
    at.extend(parts.map(str::to_string));
    Some(at)
}

/// Which file each name a module re-exports from a child comes from.
fn reexports(modules: &BTreeMap<Module, PathBuf>) -> BTreeMap<(Module, String), Module> {
    let reexport = Regex::new(r"\buse\s+self::(\w+)::([^;]+);").unwrap();
    let word = Regex::new(r"\w+").unwrap();
    let mut found = BTreeMap::new();
    for (module, file) in modules {
        for used in reexport.captures_iter(&code(file)) {
            let mut child = module.clone();
            child.push(used[1].to_string());
            if !modules.contains_key(&child) {
                continue;
            }
            for name in word.find_iter(&used[2]) {
                found.insert((module.clone(), name.as_str().to_string()), child.clone());
            }
        }
    }
    found
}

/// Each module file's imports: the module files whose items it names.
fn imports() -> BTreeMap<Module, BTreeSet<Module>> {
    let modules = modules();
    let reexported = reexports(&modules);
    let file_of = |path: &Module| -> Option<Module> {
        let at = (0..=path.len())
            .rev()
            .find(|n| modules.contains_key(&path[..*n]))?;
        let module = path[..at].to_vec();
        match path.get(at) {
            Some(name) => Some(
                reexported
                    .get(&(module.clone(), name.clone()))
                    .cloned()
                    .unwrap_or(module),
            ),
            None => Some(module),
        }
    };
    let mut graph = BTreeMap::new();
    for (module, file) in &modules {
        let targets: BTreeSet<Module> = paths(&code(file))
            .iter()
            .filter_map(|path| absolute(module, path))
            .filter_map(|path| file_of(&path))
            .filter(|target| !target.starts_with(module))
            .collect();
        graph.insert(module.clone(), targets);
    }
    graph
}

/// The circles of `graph`: its strongly connected parts of two or more.
fn circles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'g Module, usize>,
        low: BTreeMap<&'g Module, usize>,
        stack: Vec<&'g Module>,
        found: Vec<Vec<Module>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, at: &'g Module) {
            let n = self.index.len();
            self.index.insert(at, n);
            self.low.insert(at, n);
            self.stack.push(at);
            for next in self.graph.get(at).into_iter().flatten() {
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[at].min(self.low[next]);
                    self.low.insert(at, low);
                } else if self.stack.contains(&next) {
                    let low = self.low[at].min(self.index[next]);
                    self.low.insert(at, low);
                }
            }
            if self.low[at] == self.index[at] {
                let mut part = Vec::new();
                while let Some(top) = self.stack.pop() {
                    part.push(top.clone());
                    if top == at {
                        break;
                    }
                }
                if part.len() > 1 {
                    self.found.push(part);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for module in graph.keys() {
        if !walk.index.contains_key(module) {
            walk.visit(module);
        }
    }
    walk.found
}

fn named(module: &Module) -> String {
    format!("src/{}", module.join("/"))
}

#[test]
fn no_two_files_of_src_import_each_other() {
    let graph = imports();
    assert!(
        graph.len() > 100 && graph.values().map(BTreeSet::len).sum::<usize>() > 300,
        "the reading found too little to judge: {} files",
        graph.len()
    );
    let found: Vec<String> = circles(&graph)
        .iter()
        .map(|part| part.iter().map(named).collect::<Vec<_>>().join(", "))
        .collect();
    assert!(
        found.is_empty(),
        "files that import each other, however far round:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_layers_import_only_downwards() {
    let graph = imports();
    let under = |module: &Module, top: &str| module.first().is_some_and(|m| m == top);
    let mut crossed = Vec::new();
    for (from, to) in graph
        .iter()
        .flat_map(|(from, to)| to.iter().map(move |t| (from, t)))
    {
        let forbidden = [
            ("agent", "supervisor"),
            ("supervisor", "agent"),
            ("git", "run"),
            ("agent", "run"),
            ("web", "run"),
            ("web", "supervisor"),
            ("web", "agent"),
        ];
        if forbidden
            .iter()
            .any(|(a, b)| under(from, a) && under(to, b))
        {
            crossed.push(format!("{} imports {}", named(from), named(to)));
        }
    }
    assert!(crossed.is_empty(), "{}", crossed.join("\n"));
}

/// No file of `src/` or `bin/` is over 800 lines, tests in it included:
/// a file that long holds more than one job.
#[test]
fn no_file_is_over_800_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut long = Vec::new();
    let mut read = 0;
    for dir in ["src", "bin"] {
        for entry in walkdir::WalkDir::new(root.join(dir)) {
            let path = entry.unwrap().into_path();
            if path.extension().is_some_and(|ext| ext == "rs") {
                read += 1;
                let lines = std::fs::read_to_string(&path).unwrap().lines().count();
                if lines > 800 {
                    long.push(format!("{}: {lines} lines", path.display()));
                }
            }
        }
    }
    assert!(
        read > 100,
        "the reading found too little to judge: {read} files"
    );
    assert!(
        long.is_empty(),
        "files over 800 lines:\n{}",
        long.join("\n")
    );
}

/// The reading itself, on a circle made for it: a test that cannot fail
/// proves nothing.
#[test]
fn a_circle_is_found_where_there_is_one() {
    let module = |path: &str| -> Module { path.split('/').map(str::to_string).collect() };
    let graph = BTreeMap::from([
        (module("run/a"), BTreeSet::from([module("run/b")])),
        (module("run/b"), BTreeSet::from([module("run/c")])),
        (module("run/c"), BTreeSet::from([module("run/a")])),
        (module("run/d"), BTreeSet::from([module("run/a")])),
    ]);
    let found = circles(&graph);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].len(), 3, "{found:?}");
    assert_eq!(
        paths("use super::{briefs::{Review, SentBack}, step};\nlet x = crate::git::Git::new(p);"),
        BTreeSet::from([
            "super::briefs::Review".to_string(),
            "super::briefs::SentBack".to_string(),
            "super::step".to_string(),
            "crate::git::Git::new".to_string(),
        ])
    );
    assert_eq!(
        absolute(&module("run/isolation/open"), "super::super::step::Step"),
        Some(module("run/step/Step"))
    );
}
