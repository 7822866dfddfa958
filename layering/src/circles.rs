//! Files that import each other in a loop: the strongly connected components of the import graph
//! with more than one file (Tarjan's algorithm).

use crate::{Graph, Module};
use std::collections::{BTreeMap, BTreeSet};

/// Every circle of `g`, each as the files in it.
pub fn circles(g: &Graph) -> Vec<Vec<Module>> {
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

struct State<'a> {
    g: &'a Graph,
    index: BTreeMap<&'a Module, usize>,
    low: BTreeMap<&'a Module, usize>,
    stack: Vec<&'a Module>,
    on: BTreeSet<&'a Module>,
    next: usize,
    out: Vec<Vec<Module>>,
}

fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
    s.index.insert(v, s.next);
    s.low.insert(v, s.next);
    s.next += 1;
    s.stack.push(v);
    s.on.insert(v);
    let g = s.g;
    for w in g.get(v).into_iter().flatten() {
        if !s.index.contains_key(w) {
            visit(s, w);
            let lowest = s.low[v].min(s.low[w]);
            s.low.insert(v, lowest);
        } else if s.on.contains(w) {
            let lowest = s.low[v].min(s.index[w]);
            s.low.insert(v, lowest);
        }
    }
    if s.low[v] == s.index[v] {
        let mut comp = Vec::new();
        while let Some(w) = s.stack.pop() {
            s.on.remove(w);
            comp.push(w.clone());
            if w == v {
                break;
            }
        }
        if comp.len() > 1 {
            comp.sort();
            s.out.push(comp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> Module {
        vec![s.to_owned()]
    }

    #[test]
    fn a_loop_is_one_circle_and_a_chain_is_none() {
        let g: Graph = BTreeMap::from([
            (m("a"), BTreeSet::from([m("b")])),
            (m("b"), BTreeSet::from([m("c")])),
            (m("c"), BTreeSet::from([m("a"), m("d")])),
            (m("d"), BTreeSet::new()),
        ]);
        assert_eq!(circles(&g), [vec![m("a"), m("b"), m("c")]]);
        let chain: Graph = BTreeMap::from([
            (m("a"), BTreeSet::from([m("b")])),
            (m("b"), BTreeSet::new()),
        ]);
        assert!(circles(&chain).is_empty());
    }
}
