"""Running programs for the command tools: policy, script checking, working directory, environment, runner.

The flow of one request is in `service.execute`; process mechanics are in
`runner` and `groups`; `launch` is where an OS sandbox will wrap the argv.
"""
