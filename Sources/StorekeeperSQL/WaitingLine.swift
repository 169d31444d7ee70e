/// A first-in, first-out line of waiting things (callers waiting for a connection, jobs waiting for a
/// thread): appending and taking are O(1) on average, and taken slots are released (a taken element is not
/// kept alive), so that a line that never empties under steady traffic stays bounded by what waits.
package struct WaitingLine<Element> {
    private var items: [Element?] = []
    private var head = 0

    package init() {}

    /// How many wait.
    package var count: Int { items.count - head }
    package var isEmpty: Bool { head == items.count }

    package mutating func append(_ element: Element) { items.append(element) }

    /// The one waiting longest, left in the line; nil when none waits.
    package var first: Element? { head < items.count ? items[head] : nil }

    /// The one waiting longest, taken from the line; nil when none waits.
    package mutating func take() -> Element? {
        guard head < items.count else { return nil }
        let element = items[head]
        items[head] = nil
        head += 1
        if head == items.count {
            items.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 1_024, head * 2 >= items.count {
            // Never emptied while more keep coming: the taken slots go, so the array stays bounded.
            items.removeFirst(head)
            head = 0
        }
        return element
    }

    /// Slots held, taken ones included (tests: what the line keeps).
    package var capacityInUse: Int { items.count }
}
