"""The ground floor: what every wing imports and that imports nothing of ours. Records written
atomically and read back with their provenance (records), one owner per run folder (runlock), the
paired statistics (stats) and the devices with their peak FLOPs (common)."""
