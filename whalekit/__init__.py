from whalekit.types import Task
