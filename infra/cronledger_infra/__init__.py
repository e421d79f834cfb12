"""cronledger's AWS infrastructure as a CDK app: one stack composing one construct per file."""
