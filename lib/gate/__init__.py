"""The decision: pure functions over plain, typed data (request, policy, state in; decision out).

Nothing here opens a file or a database; every layer above may import it.
"""
