//! Power of two choices: pick two distinct candidates at random and take the less loaded. Pure.

/// Index of the chosen candidate among `n`, given each one's load and a random source
/// `rand(k)` returning a value in `0..k`. Ties go to the first pick.
pub(super) fn choose(
    n: usize,
    load: impl Fn(usize) -> usize,
    mut rand: impl FnMut(usize) -> usize,
) -> Option<usize> {
    match n {
        0 => None,
        1 => Some(0),
        _ => {
            let a = rand(n);
            let mut b = rand(n - 1);
            if b >= a {
                b += 1;
            }
            Some(if load(b) < load(a) { b } else { a })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_single() {
        assert_eq!(choose(0, |_| 0, |_| 0), None);
        assert_eq!(choose(1, |_| 9, |_| 0), Some(0));
    }

    #[test]
    fn takes_the_less_loaded_of_two_distinct_picks() {
        let loads = [5, 1, 3];
        // Picks 0 then (0 -> shifted to) 1: endpoint 1 is less loaded.
        assert_eq!(choose(3, |i| loads[i], |_| 0), Some(1));
        // Picks 2 then 0: endpoint 2 (3) beats endpoint 0 (5).
        let mut seq = [2, 0].into_iter();
        assert_eq!(
            choose(3, |i| loads[i], |_| seq.next().unwrap_or(0)),
            Some(2)
        );
    }

    #[test]
    fn the_most_loaded_is_never_chosen_over_many_draws() {
        let loads = [10, 0, 0, 0];
        for seed in 0..200u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            assert_ne!(choose(4, |i| loads[i], |k| rng.usize(..k)), Some(0));
        }
    }
}
