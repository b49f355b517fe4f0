extension CloudRecord {
    /// The `rejection` of a record whose last save came from `device` as `account`, which may not write `zone`
    /// (neither its owner nor a read-write participant, nor one until the record's seq).
    public static func rejection(device: String, account: String, zone: String) -> String {
        "saved by device \(device) of account '\(account)', who may not write zone '\(zone)'"
    }

    /// What a backend's check of a record's saver returns for a record that no account is recorded to have saved
    /// (written into the container by something else than storectl): this prefix, then the account its device
    /// is registered to (empty when none).
    public static let unrecordedSaverPrefix = "\u{1F}"

    /// The `rejection` for the check's value `saver`: an account that may not write the zone, or
    /// `unrecordedSaverPrefix` and the account the record's device is registered to.
    public static func rejection(device: String, saver: String, zone: String) -> String {
        guard saver.hasPrefix(unrecordedSaverPrefix) else { return rejection(device: device, account: saver, zone: zone) }
        let registered = String(saver.dropFirst(unrecordedSaverPrefix.count))
        return "saved by device \(device) "
            + (registered.isEmpty ? "(registered to no account)" : "of account '\(registered)'")
            + " without a saving account on record (written outside storectl); not applied to zone '\(zone)'"
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
