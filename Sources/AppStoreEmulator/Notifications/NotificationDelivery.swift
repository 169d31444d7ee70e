import Synchronization

/// The notifications this process has claimed and not yet recorded a result for, each with the token of
/// its claim (a slot given back by a write that did not commit is given back only if no later claim took it)
/// and its receiver (URL), and how many slots each receiver holds.
struct InFlight: Sendable {
    var claims: [String: (token: UInt64, url: String)] = [:]
    var perReceiver: [String: Int] = [:]
    var nextToken: UInt64 = 0

    /// Whether `url` may take one more of `limit` slots: it holds fewer than `receiverLimit`, and the last
    /// `reserve` slots go only to receivers that hold none (so receivers that hang cannot take them all).
    func allows(_ url: String, limit: Int, receiverLimit: Int, reserve: Int) -> Bool {
        let held = perReceiver[url, default: 0]
        return held < receiverLimit && claims.count < (held == 0 ? limit : limit - reserve)
    }

    /// Claims a slot for `id`, sent to `url`, if the limits allow one; its token.
    mutating func claim(_ id: String, url: String, limit: Int, receiverLimit: Int, reserve: Int) -> UInt64? {
        guard claims[id] == nil, allows(url, limit: limit, receiverLimit: receiverLimit, reserve: reserve) else {
            return nil
        }
        nextToken += 1
        claims[id] = (nextToken, url)
        perReceiver[url, default: 0] += 1
        return nextToken
    }

    /// Gives back `id`'s slot if `token` still holds it.
    mutating func release(_ id: String, token: UInt64) {
        guard let claim = claims[id], claim.token == token else { return }
        claims[id] = nil
        let left = perReceiver[claim.url, default: 1] - 1
        perReceiver[claim.url] = left > 0 ? left : nil
    }
}

/// The delivery slots one write takes, with their claims' tokens: given back if the write does not commit.
final class SlotClaims: Sendable {
    let taken = Mutex<[(id: String, token: UInt64)]>([])
}

/// How this process sends the outbox's notifications: at most ``maxInFlight`` at once (each holds a slot
/// from the write that claims it until its result is recorded), a share of them per receiver, on shared
/// delivery lanes; and whether the outbox's delivery queue can move. State only: the store claims and gives
/// back slots inside its writes; this type has no storage, clock or network of its own.
final class NotificationDelivery: Sendable {
    /// Notifications sent at once at most; the rest wait in the outbox's delivery queue.
    let maxInFlight: Int
    /// Notifications this process has claimed and not yet recorded a result for (each holds a delivery
    /// slot): a lease that falls due meanwhile does not send again.
    let inFlight = Mutex(InFlight())
    /// Bumped whenever a delivery slot is given back (only that lets a queued notification move); a claim
    /// that found nothing it could take notes the value it started with in `queueSettled`, so that no write
    /// asks the queue again until the next bump.
    let queueEpoch = Atomic<UInt64>(1)
    let queueSettled = Atomic<UInt64>(0)
    /// Where the next claim from the queue starts among the receivers waiting (each pass, the next one).
    let queueTurn = Atomic<Int>(0)
    /// The threads that send.
    let lanes = DeliveryLanes(lanes: lanesCount, perReceiver: lanesPerReceiver, reserve: lanesReserve)

    /// Threads sending notifications, shared by every batch and receiver (``DeliveryLanes``).
    static let lanesCount = 20
    /// The lanes one receiver (URL) may hold: a receiver that does not answer leaves the rest to others.
    static let lanesPerReceiver = 16
    /// The lanes kept for receivers that have none (``DeliveryLanes``).
    static let lanesReserve = 2

    init(maxInFlight: Int) { self.maxInFlight = max(1, maxInFlight) }

    /// Whether `id` is being sent by this process now.
    func isInFlight(_ id: String) -> Bool { inFlight.withLock { $0.claims[id] != nil } }

    /// The delivery slots one receiver (URL) may hold: three quarters of them (all but one below four), so
    /// that a receiver that does not answer leaves the rest to the others.
    var maxPerReceiver: Int {
        let limit = maxInFlight
        return limit < 2 ? 1 : min(limit - 1, limit - limit / 4)
    }

    /// The last slots, taken only by a receiver that holds none: one in 16 (at least one), so that however
    /// many receivers hang, one that answers still has a slot to be sent through.
    var slotReserve: Int { maxInFlight < 2 ? 0 : max(1, maxInFlight / 16) }

    /// Takes one of the ``maxInFlight`` delivery slots for `id` within the write that claims
    /// it, if one is free and its receiver holds fewer than ``maxPerReceiver``, noting
    /// the claim in `claims`. The slot is given back when the attempt's result is recorded, or by the
    /// claiming write's caller if that write does not commit.
    func takeSlot(_ id: String, url: String, claims: SlotClaims) -> Bool {
        let token = inFlight.withLock { inFlight in
            inFlight.claim(
                id, url: url, limit: maxInFlight, receiverLimit: maxPerReceiver,
                reserve: slotReserve)
        }
        guard let token else { return false }
        claims.taken.withLock { $0.append((id, token)) }
        return true
    }

    /// Gives back slots, each only if it is still held by the claim given (not by a later one): the
    /// delivery queue may move again.
    func release(_ claims: some Sequence<(id: String, token: UInt64)>) {
        inFlight.withLock { inFlight in
            for (id, token) in claims { inFlight.release(id, token: token) }
        }
        queueEpoch.add(1, ordering: .sequentiallyConsistent)
    }

    /// Gives back the slots a write took, when it did not commit (what it took from the delivery queue is
    /// back there).
    func release(_ claims: SlotClaims) {
        release(claims.taken.withLock { $0 })
    }

    /// False while the last look at the delivery queue found nothing it could take and no slot was given
    /// back since (only a slot given back lets a queued notification move: one is queued only when its
    /// receiver, or every receiver, has no slot free).
    var queueMayMove: Bool {
        queueSettled.load(ordering: .sequentiallyConsistent)
            != queueEpoch.load(ordering: .sequentiallyConsistent)
    }

    /// Whether queued notifications may be waiting for slots that are free now (a cheap check before a
    /// write).
    var queueCanMove: Bool {
        queueMayMove && inFlight.withLock { $0.claims.count } < maxInFlight
    }
}
