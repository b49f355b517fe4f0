import FoundationEssentials
import StoreBase
import StoreCloud
import StoreConfig
import StoreHistory
import StoreMirror

/// A store bound to a container never gets a new, empty one by accident: `cloud.create_if_missing` creates a
/// container only for a store that has never been bound to one. For a bound store a missing container (a container
/// file moved away, a PostgreSQL schema dropped) is exit 69 naming the URL and the two ways on: point `cloud.url`
/// at where the container went, or start a new one on purpose with `migrate --cloud`.
extension StoreHandle {
    /// The container the store has been bound to (`CONTAINER` or the URL it was bound at), or nil for a store that
    /// never was: a store file that is missing or not initialised, or that never synced. Reads only.
    public func boundContainer() -> String? {
        guard exists, let db = try? database(), (try? db.tableExists("_storectl_meta")) == true else { return nil }
        for key in [MetaKey.boundContainer, .baselineContainer, .boundURL] {
            if let value = try? MirrorState.meta(db, key), !value.isEmpty { return value }
        }
        return nil
    }

    /// The error for the container of a bound store that is not there (exit 69): what, where, and what to do.
    public func boundContainerMissingError(_ cloud: CloudSettings) -> CloudError {
        let url = CloudConnector.redacted(cloud.url)
        var place = url
        if case .file(let path)? = try? CloudConnector.backend(of: cloud.url) { place = "\(url) (\(path))" }
        return CloudError(.containerMissing,
                          "store '\(settings.name)' is bound to container '\(cloud.container)', which is no longer at "
                              + "\(place); nothing was created or changed",
                          hint: "if the container was moved, point the config at its new place: 'storectl config set "
                              + "stores.\(settings.name).cloud.url NEW_URL'; to start a new, empty container on "
                              + "purpose, run 'storectl migrate --cloud NEW_URL --no-final-sync'")
    }

    /// The account status of the configured account and the container the check opened, as
    /// `CloudConnector.accountStatusAndContainer` gives them, except that the container of a bound store that is
    /// gone is said as such (`couldNotDetermine`, never `available` because `create_if_missing` could make a new
    /// one). `status`, `doctor`, `verify` and every sync take the account's status from here.
    public func accountStatusAndContainer(_ cloud: CloudSettings) -> (report: AccountStatusReport,
                                                                      container: (any CloudDatabase)?)
    {
        let (report, container) = CloudConnector.accountStatusAndContainer(settings: cloud, environment: environment)
        guard report.containerMissing, boundContainer() != nil else { return (report, container) }
        return (boundMissingReport(cloud, account: report.account), nil)
    }

    /// The account status a bound store's missing container is reported with.
    func boundMissingReport(_ cloud: CloudSettings, account: String?) -> AccountStatusReport {
        let error = boundContainerMissingError(cloud)
        return AccountStatusReport(status: .couldNotDetermine,
                                   reason: error.summary + (error.hint.map { "; " + $0 } ?? ""), account: account,
                                   containerMissing: true)
    }

    /// `error` told for this store: the container of a bound store that is missing is `boundContainerMissingError`;
    /// for an unbound store with `create_if_missing` set, the hint does not ask to set it. Other errors as they are.
    public func explainMissingContainer(_ error: any Error) -> any Error {
        guard let cloudError = error as? CloudError, cloudError.kind == .containerMissing,
              let cloud = settings.cloud
        else { return error }
        if boundContainer() != nil { return boundContainerMissingError(cloud) }
        if cloud.createIfMissing, cloudError.hint?.contains("create_if_missing") == true {
            return CloudError(.containerMissing, cloudError.summary,
                              hint: "run 'storectl sync' (or 'storectl mode cloud' for a store in local mode): "
                                  + "cloud.create_if_missing is set, so the first sync creates it; or run "
                                  + "'storectl cloud init'")
        }
        return error
    }
}
