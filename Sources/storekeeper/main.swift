import StorekeeperCLI
import Foundation

exit(Storekeeper.run(Array(CommandLine.arguments.dropFirst())))
