# Start the runner with an explicitly chosen Python:
#   $env:PYTHON = "C:\path\to\python.exe"; .\run.ps1 [runner options]
#   .\run.ps1 C:\path\to\python.exe [runner options]
# The runner reports (GET /status) the dependencies of exactly that interpreter.
$ErrorActionPreference = "Stop"
$Here = Split-Path -Parent $MyInvocation.MyCommand.Path
$Rest = @($args)
if ($Rest.Count -gt 0 -and -not ([string]$Rest[0]).StartsWith("-")) {
    $Python = [string]$Rest[0]
    $Rest = @($Rest | Select-Object -Skip 1)
} elseif ($env:PYTHON) {
    $Python = $env:PYTHON
} else {
    $Python = "python"
    Write-Host "note: no Python given; using 'python' from PATH (set `$env:PYTHON or pass it first)"
}
if (-not (Get-Command $Python -ErrorAction SilentlyContinue)) {
    Write-Error "Python interpreter '$Python' not found; set `$env:PYTHON to its full path"
    exit 2
}
& $Python (Join-Path $Here "algolab_local_runner.py") @Rest
exit $LASTEXITCODE
