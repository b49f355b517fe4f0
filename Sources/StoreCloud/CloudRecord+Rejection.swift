extension CloudRecord {
    /// The `rejection` of a record whose last save came from `device`, registered to `account`, which may not write
    /// `zone` (neither its owner nor a read-write participant).
    public static func rejection(device: String, account: String, zone: String) -> String {
        "saved by device \(device) of account '\(account)', who may not write zone '\(zone)'"
    }
}

extension ZoneAccess {
    /// The level of `account` in a zone owned by `owner` (nil: a zone from before shares, which every account
    /// may use as its owner would), with the account's share permission, if any.
    public static func level(account: String, owner: String?, permission: String?) -> Level {
        guard let owner, owner != account else { return .owner }
        return permission.flatMap(SharePermission.init(rawValue:)).map { $0 == .readWrite ? .readWrite : .readOnly }
            ?? .none
    }

    /// The error for a write this access does not allow (nil when it does): no share, or a read-only one.
    public func writeError(container: String) -> CloudError? {
        switch level {
        case .owner, .readWrite: return nil
        case .readOnly: return readOnlyError(container: container)
        case .none: return noShareError(container: container)
        }
    }
}
