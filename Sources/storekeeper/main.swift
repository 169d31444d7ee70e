import Foundation
import StorekeeperCLI

exit(Storekeeper.run(Array(CommandLine.arguments.dropFirst())))
