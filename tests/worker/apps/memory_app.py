"""An app on memory:// (which worker processes cannot share: the CLI refuses it)."""

from conveyor import Conveyor

app = Conveyor("memory://")
