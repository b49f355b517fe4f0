/// What the history layer needs to know about a store, whatever the config file says.
///
/// The `Storectl` library builds this from a store's settings; the history layer never sees the config or YAML.
///
///     let options = TrackingOptions(author: "notes-app", entities: ["notes", "tags"],
///                                   tombstones: ["notes": ["id", "uuid"]])
public struct TrackingOptions: Sendable, Equatable {
    /// The author of storectl's own writes (`HistoryTracker.write` without an explicit author).
    public var author: String
    /// The tables to track, or nil for every user table.
    public var entities: [String]?
    /// Per table, the columns whose old values a delete records (default: the primary key).
    public var tombstones: [String: [String]]
    /// Must stay true: installing or repairing with tracking off is refused (exit 78).
    public var tracking: Bool

    public init(author: String = "storectl", entities: [String]? = nil, tombstones: [String: [String]] = [:],
                tracking: Bool = true)
    {
        self.author = author
        self.entities = entities
        self.tombstones = tombstones
        self.tracking = tracking
    }
}
