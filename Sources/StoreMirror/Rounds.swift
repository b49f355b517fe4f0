import StoreBase

/// The engine's one retry rule for work done in rounds.
///
/// - **Local rounds** (draining the inbox, settling held-back records, following orphans down a tree, following a
///   merged duplicate's aliases): another round runs only while the last one made progress, that is while the state
///   the rounds read is one they have not seen before. Work that only shrinks or only grows runs to its end however
///   deep the user's data goes (a chain of 1,000 orphans takes 1,000 rounds); work that would go round in a cycle
///   stops at its first repeat. No round count is a guess at a depth.
/// - **Cloud rounds** (a save met a conflict and is sent again over the server's newer version): the state is the
///   cloud's, which other devices change, so a repeat cannot be told from progress. They stop after
///   `CloudRounds.attempts` saves with `CloudRounds.busy` (exit 75): what was not saved stays pending for the next
///   sync, and nothing is lost.
struct Rounds<State: Hashable> {
    private var seen: Set<State> = []

    init() {}

    /// Whether another round may run on `state`: true the first time a state is met, false when it repeats.
    mutating func another(_ state: State) -> Bool { seen.insert(state).inserted }
}

/// The cloud rounds of the retry rule (`Rounds`).
enum CloudRounds {
    /// How many times one export sends a record over the cloud's newer version before it gives up for this sync.
    static let attempts = 5

    /// The error of a save that met a newer version on each of its `attempts` tries.
    static var busy: StoreError {
        StoreError(.tempFail, "records kept changing in the cloud while they were being saved",
                   hint: "run 'storectl sync' again: what was not saved is still pending here")
    }
}
