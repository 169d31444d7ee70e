import StorekeeperSQL
import Testing

@Suite("A waiting line (first in, first out)")
struct WaitingLineTests {
    @Test("Taken in the order appended; empty gives nil; a line that never empties stays bounded")
    func order() {
        var line = WaitingLine<Int>()
        #expect(line.take() == nil && line.isEmpty)
        for number in 0..<5 { line.append(number) }
        #expect(line.count == 5)
        #expect([line.take(), line.take()] == [0, 1])
        line.append(5)
        #expect((0..<4).map { _ in line.take() } == [2, 3, 4, 5])
        #expect(line.take() == nil && line.isEmpty && line.capacityInUse == 0)
        // Steady traffic: one in, one out, a hundred always waiting; the slots held stay near what waits.
        for number in 0..<100 { line.append(number) }
        var expected = 0
        var largest = 0
        for number in 100..<100_000 {
            line.append(number)
            #expect(line.take() == expected)
            expected += 1
            largest = max(largest, line.capacityInUse)
        }
        #expect(line.count == 100)
        #expect(largest <= 2 * 1_024 + 100, "slots held: \(largest)")
    }

    @Test("A taken element is released: the line keeps no reference to it")
    func releases() {
        final class Box {}
        var line = WaitingLine<Box>()
        weak var weakBox: Box?
        do {
            let box = Box()
            weakBox = box
            line.append(box)
            line.append(Box())
            _ = line.take()
        }
        #expect(weakBox == nil && line.count == 1)
    }
}
