import StoreBase

/// What an account may do in a container.
public enum AccountRole: String, Sendable, Codable, CaseIterable {
    /// May manage the container's accounts, as well as read and write records.
    case owner
    /// May read and write records.
    case member
}

/// Managing a container's accounts: the backends whose accounts live in the container itself (the file backend).
///
/// Only an owner whose account is available may add or disable accounts. A container with no accounts at all
/// accepts its first account from anyone who can write to it.
public protocol CloudAccountAdministration: CloudDatabase {
    /// Registers a new account with `secret`; the container keeps only a salted hash of it.
    /// - Throws: `CloudError` (`.invalid` when the id is taken or malformed, `.account` when this connection's
    ///   account may not manage accounts, `.permission` when the container is read-only).
    func addAccount(id: String, secret: String, role: AccountRole) throws

    /// Disables an account: its status becomes `restricted`. The last enabled owner cannot be disabled.
    /// - Throws: `CloudError`.
    func disableAccount(id: String) throws

    /// Enables a disabled account again.
    /// - Throws: `CloudError`.
    func enableAccount(id: String) throws

    /// Removes an account from the container. The last enabled owner cannot be removed.
    /// - Throws: `CloudError`.
    func removeAccount(id: String) throws

    /// Every account, by id. Never includes a secret or its hash.
    /// - Throws: `CloudError`.
    func listAccounts() throws -> [AccountInfo]
}
