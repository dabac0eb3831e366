//! `snowflake-sql-order`: the extension's SQL script, in the one order its dependency graph and
//! its entities give, whatever order cargo-pgrx happened to generate it in.
//!
//! cargo-pgrx 0.19.3 builds a graph of the extension's SQL entities (functions, `extension_sql!`
//! blocks, ...) with an edge from each object to every object that needs it, and writes the
//! strongly connected components of that graph in reverse Tarjan order: a topological order.
//! The nodes are added in a sorted order, but most edges are added while iterating `HashMap`s
//! whose seed is random in each run, and Tarjan's walk visits a node's neighbours in the order
//! their edges were added. So two runs over the same library can write the same objects in two
//! valid orders (issue 63: two different .debs of one commit).
//!
//! This tool rebuilds pgrx's own graph from the library's schema section (`.pgrxsc`, extracted
//! with objcopy by scripts/package-common.sh) exactly as cargo-pgrx does, then removes every edge
//! and adds them back sorted by (from, to, kind) before pgrx's own `to_sql` writes the script.
//! Nothing but the order of ties changes: the nodes, the edges and the writer are pgrx's, so
//! the result is still a topological order of the same graph (checked below, edge by edge), and
//! its blocks are exactly cargo-pgrx's (checked against the file cargo-pgrx wrote, which this
//! replaces).
//!
//! ```text
//! snowflake-sql-order SECTION CONTROL VERSION SCRIPT [--check N]
//! ```
//!
//! SECTION: the raw `.pgrxsc` section; CONTROL: the control file (`snowflake.control`); VERSION:
//! the crate's version (for `@CARGO_VERSION@`); SCRIPT: the script cargo-pgrx generated, rewritten
//! in place. `--check N` (tests/package.rs) also builds the graph N more times with its edges
//! added in N shuffled orders and fails unless each gives the same script; it then says how many
//! distinct scripts the shuffled orders gave without the sort.

use std::process::ExitCode;

use petgraph::stable_graph::{NodeIndex, StableGraph};
use petgraph::visit::{EdgeRef, IntoEdgeReferences, NodeIndexable};
use pgrx_sql_entity_graph::section::decode_entities;
use pgrx_sql_entity_graph::{ControlFile, PgrxSql, SqlGraphEntity};

/// An edge: from the object needed, to the object that needs it, and how (pgrx's
/// `SqlGraphRequires`, which it does not export: generic here, `Copy + Ord`).
type Edge<K> = (NodeIndex, NodeIndex, K);

/// pgrx's graph of the library's entities, built as cargo-pgrx 0.19.3 builds it
/// (`generate_schema_implicit`): the control file's root first, then the section's entities.
fn build<'a>(section: &'a [u8], control: &ControlFile) -> Result<PgrxSql<'a>, String> {
    let mut entities = vec![SqlGraphEntity::ExtensionRoot(control.clone())];
    entities.extend(decode_entities(section).map_err(|e| format!("the schema section: {e:#}"))?);
    // versioned_so is false: snowflake.control names its module_pathname.
    PgrxSql::build(entities.into_iter(), "snowflake".to_string(), false)
        .map_err(|e| format!("pgrx's graph: {e:#}"))
}

fn edges<N, K: Copy>(graph: &StableGraph<N, K>) -> Vec<Edge<K>> {
    graph
        .edge_references()
        .map(|e| (e.source(), e.target(), *e.weight()))
        .collect()
}

/// The graph's edges removed and added back in `order` (its nodes and their indices unchanged).
fn reconnect<N, K: Copy>(graph: &mut StableGraph<N, K>, order: &[Edge<K>]) {
    graph.clear_edges();
    for &(from, to, kind) in order {
        graph.add_edge(from, to, kind);
    }
}

/// The graph's edges in sorted order.
fn sort_edges<N, K: Copy + Ord>(graph: &mut StableGraph<N, K>) {
    let mut order = edges(graph);
    order.sort_by_key(|&(from, to, kind)| (from.index(), to.index(), kind));
    reconnect(graph, &order);
}

/// The sorted edge order: the same graph always gives the same script.
fn canonical(sql: &mut PgrxSql) -> Result<String, String> {
    sort_edges(&mut sql.graph);
    check_topological(sql)?;
    sql.to_sql().map_err(|e| format!("pgrx's to_sql: {e:#}"))
}

/// Every object comes after all it needs: pgrx writes the components of reverse Tarjan order,
/// so each edge between two components must go from an earlier to a later one.
fn check_topological(sql: &PgrxSql) -> Result<(), String> {
    let mut position = vec![usize::MAX; sql.graph.node_bound()];
    for (i, component) in petgraph::algo::tarjan_scc(&sql.graph)
        .iter()
        .rev()
        .enumerate()
    {
        for node in component {
            position[node.index()] = i;
        }
    }
    for (from, to, _) in edges(&sql.graph) {
        if position[from.index()] > position[to.index()] {
            return Err(format!(
                "{:?} is written after {:?}, which needs it",
                sql.graph[from], sql.graph[to]
            ));
        }
    }
    Ok(())
}

/// The script's blocks (pgrx's "connected objects"), sorted: the same multiset of blocks
/// whatever their order.
fn blocks(script: &str) -> Vec<&str> {
    let mut blocks: Vec<&str> = script.split("/* <begin connected objects> */\n").collect();
    blocks.sort_unstable();
    blocks
}

/// A small seeded PRNG (xorshift64*) for the shuffles: no dependency, the same shuffles each run.
fn shuffled<K: Copy>(edges: &[Edge<K>], seed: u64) -> Vec<Edge<K>> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let mut out = edges.to_vec();
    for i in (1..out.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        out.swap(i, j);
    }
    out
}

fn run(args: &[String]) -> Result<(), String> {
    let (paths, check) = match args {
        [s, c, v, o] => ([s, c, v, o], None),
        [s, c, v, o, flag, n] if flag == "--check" => (
            [s, c, v, o],
            Some(n.parse::<u64>().map_err(|e| format!("--check {n}: {e}"))?),
        ),
        _ => {
            return Err(
                "usage: snowflake-sql-order SECTION CONTROL VERSION SCRIPT [--check N]".into(),
            )
        }
    };
    let [section, control, version, script] = paths;
    let section = std::fs::read(section).map_err(|e| format!("{section}: {e}"))?;
    let control = ControlFile::from_path_with_cargo_version(control, version)
        .map_err(|e| format!("{control}: {e}"))?;
    let generated = std::fs::read_to_string(script).map_err(|e| format!("{script}: {e}"))?;

    let mut sql = build(&section, &control)?;
    let wanted = canonical(&mut sql)?;
    if blocks(&wanted) != blocks(&generated) {
        return Err(format!(
            "{script}: cargo-pgrx wrote other SQL than pgrx-sql-entity-graph 0.19.3 gives for this \
             library, not only in another order (is cargo-pgrx 0.19.3?)"
        ));
    }

    if let Some(n) = check {
        let mut unsorted = std::collections::BTreeSet::new();
        for seed in 1..=n {
            // A new graph each time: its HashMaps have new seeds, as in a new cargo-pgrx run.
            let mut again = build(&section, &control)?;
            let order = shuffled(&edges(&again.graph), seed);
            reconnect(&mut again.graph, &order);
            check_topological(&again)?;
            unsorted.insert(
                again
                    .to_sql()
                    .map_err(|e| format!("pgrx's to_sql: {e:#}"))?,
            );
            if canonical(&mut again)? != wanted {
                return Err(format!(
                    "shuffle {seed}: the sorted edges gave another script"
                ));
            }
        }
        println!(
            "{n} shuffled edge orders: 1 script sorted, {} distinct unsorted",
            unsorted.len()
        );
        if generated == wanted {
            return Ok(());
        }
        return Err(format!("{script} is not in the sorted order"));
    }

    std::fs::write(script, wanted).map_err(|e| format!("{script}: {e}"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("snowflake-sql-order: {e}");
            ExitCode::FAILURE
        }
    }
}
